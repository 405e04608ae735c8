# syntax=docker/dockerfile:1
# vllm-sim: the simulator as a container. `make image` builds it as vllm-sim:dev.
#
# The entrypoint is the simulator itself, so a pod's `args:` are its command line: flags
# written for llm-d-inference-sim (`--model M --port 8000 ...`) and for `vllm serve`
# (a positional model first, then vLLM's flags) both work. `vllm` and
# `/app/llm-d-inference-sim` are the same program, for manifests that name a command.
#
# The base is pinned by digest so a rebuild gets the same interpreter and system libraries;
# to move it, replace the digest with the one `docker buildx imagetools inspect
# python:3.11-slim-bookworm` prints (the interpreter the test suite runs on).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/vllm-sim
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY src ./src
# A regular (not editable) install: the runtime stage copies only the environment. This
# base has no C compiler, so the hot modules stay interpreted (setup.py's fallback).
RUN /opt/vllm-sim/bin/pip install . \
    && /opt/vllm-sim/bin/python -m compileall -q /opt/vllm-sim/lib

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/vllm-sim /opt/vllm-sim
RUN ln -s /opt/vllm-sim/bin/vllm-sim /opt/vllm-sim/bin/vllm \
    && mkdir /app && ln -s /opt/vllm-sim/bin/vllm-sim /app/llm-d-inference-sim
# The user the distroless images call nonroot; the Hugging Face cache (tokenizers and
# chat templates of --model) goes to /tmp, writable for it and an emptyDir in the manifests.
USER 65532:65532
WORKDIR /tmp
ENV PATH=/opt/vllm-sim/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/tmp/huggingface
EXPOSE 8000
# The check reads the server's own arguments, so it follows --port, --host, TLS and --config.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "vllm_sim.tools.healthcheck"]
ENTRYPOINT ["vllm-sim"]
CMD ["--model", "Qwen/Qwen2.5-1.5B-Instruct", "--port", "8000"]
