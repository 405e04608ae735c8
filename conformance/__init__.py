"""Conformance of vllm-sim against a real vLLM server (`make conformance`).

Both servers get the same requests (cases.py); the answers are compared content aside
(compare.py: status, content-type, JSON key paths and value kinds, SSE framing and chunk
sequences, error envelopes and texts), known differences are accepted with a reason
(accepted.toml), and a report is written to .conformance/report.md.
"""
