"""The benchmark suite: the simulator beside a bare-ASGI baseline on the same server stack.

`python -m bench` (or `make bench`) runs every benchmark; `--quick` runs a short version,
`--only NAME` one of them. Figures are measured in one run and printed as ratios
sim/baseline so that they survive machine noise. Nothing here asserts on timing.
"""
