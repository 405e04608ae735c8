"""`vllm-sim` / `python -m vllm_sim`: parse the configuration, then serve."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Sequence

from vllm_sim.config import Config, ConfigError, HelpRequested, load_startup

Note = tuple[int, str]  # (logging level, message)

KV_NEEDS_POD_IP = "IP should be defined in the environment (POD_IP) for KV cache to work"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["dataset"]:  # the dataset tool, not a server
        from vllm_sim.server.dataset_tool import main as dataset_main

        return dataset_main(args[1:])
    if args[:1] == ["replay"]:  # what-if runs, not a server
        from vllm_sim.whatif.cli import replay_main

        return replay_main(args[1:])
    if args[:1] == ["compare"]:
        from vllm_sim.whatif.cli import compare_main

        return compare_main(args[1:])
    if args[:1] == ["plan"]:
        from vllm_sim.whatif.plan_cli import plan_main

        return plan_main(args[1:])
    if args[:1] == ["calibrate"]:
        from vllm_sim.whatif.calibrate_cli import calibrate_main

        return calibrate_main(args[1:])
    try:
        loaded = load_startup(args, os.environ)
    except HelpRequested as help_text:
        print(help_text)  # stdout, as vLLM's: `vllm-sim --help | less` pages it
        return 0
    except ConfigError as error:
        print(f"vllm-sim: invalid configuration: {error}", file=sys.stderr)
        return 2
    cfg = loaded.config
    if cfg.enable_kvcache and not cfg.pod_ip:
        # A server-start rule, not a config one: the topic of KV events names this pod.
        print(f"vllm-sim: invalid configuration: {KV_NEEDS_POD_IP}", file=sys.stderr)
        return 2
    from vllm_sim.server.logs import configure_logging

    configure_logging(cfg)
    notes = loaded.startup_notes()
    if cfg.dataset_path:
        from vllm_sim.server.dataset_setup import DatasetSetupError, prepare_dataset

        try:  # once, before data-parallel ranks start
            prepare_dataset(cfg)
        except DatasetSetupError as error:
            print(f"vllm-sim: {error}", file=sys.stderr)
            return 2
    if not cfg.force_dummy_tokenizer:
        from vllm_sim.server.hub import download_in_child, fetch_tokenizer_files

        # Once, before any rank looks for the files; the hub library stays out of the server.
        fetch_tokenizer_files(cfg, download=download_in_child)
    if cfg.num_instances > 1:
        return serve_fleet(cfg, args, notes)
    if cfg.data_parallel_size > 1 and cfg.data_parallel_rank < 0:
        from vllm_sim.server.ranks import serve_ranks

        def rank_main(rank_cfg: Config, port: int, rank: int) -> int:
            return serve_rank(rank_cfg, port, rank, notes if rank == 0 else ())  # said once

        return serve_ranks(cfg, rank_main)
    return serve_rank(cfg, cfg.port, max(cfg.data_parallel_rank, 0), notes)


def serve_rank(cfg: Config, port: int, rank: int, notes: Sequence[Note] = ()) -> int:
    """Serves one rank in this process until it is stopped; its exit status. `notes` are
    logged once the last start-up check passed, so a failed start still says one line."""
    return serve_group([(cfg, port, rank)], notes)


def serve_fleet(cfg: Config, argv: Sequence[str], notes: Sequence[Note]) -> int:
    """Serves --num-instances instances, over --fleet-processes processes."""
    from vllm_sim.server.fleet import groups, instance_configs

    try:
        configs = instance_configs(cfg, argv, os.environ)
    except ConfigError as error:
        print(f"vllm-sim: invalid configuration: {error}", file=sys.stderr)
        return 2
    if not cfg.force_dummy_tokenizer:
        from vllm_sim.server.hub import download_in_child, fetch_tokenizer_files

        others = {c.model: c for c in configs if c.model != cfg.model}  # main() fetched cfg's
        for model_cfg in others.values():
            fetch_tokenizer_files(model_cfg, download=download_in_child)
    parts = [[(c, c.port, 0) for c in part] for part in groups(configs, cfg.fleet_processes)]
    if len(parts) == 1:
        return serve_group(parts[0], notes)
    from vllm_sim.server.ranks import serve_processes

    return serve_processes(
        [
            (f"fleet-{i}", functools.partial(serve_group, part, notes if i == 0 else ()))
            for i, part in enumerate(parts)
        ]
    )


def serve_group(members: Sequence[tuple[Config, int, int]], notes: Sequence[Note] = ()) -> int:
    """Serves instances, each a (config, port, rank), on one event loop in this process
    until stopped; the exit status. `notes` are logged once the last start-up check
    passed, so a failed start still says one line."""
    # Imported late so that --help and config errors answer fast.
    from vllm_sim.engine.tokenizer.select import TokenizerChoice
    from vllm_sim.server.build import build_instance
    from vllm_sim.server.dataset_setup import DatasetSetupError
    from vllm_sim.server.runner import serve_all
    from vllm_sim.server.step_timing import timed_config
    from vllm_sim.server.tls import TlsError, tls_setup
    from vllm_sim.server.tokenizer_setup import check_reasoning_tokenizer, choose_tokenizer

    tokenizers: dict[tuple[object, ...], TokenizerChoice] = {}  # one per model, shared
    choices = []
    try:
        timed = [timed_config(cfg, os.environ) for cfg, _, _ in members]
        for cfg, _, _ in members:
            key = (cfg.model, cfg.tokenizer, cfg.revision, cfg.force_dummy_tokenizer)
            if key not in tokenizers:
                tokenizers[key] = choose_tokenizer(cfg, os.environ)
            check_reasoning_tokenizer(cfg, tokenizers[key].tokenizer)
            choices.append(tokenizers[key])
        tls = tls_setup(members[0][0])
    except (TlsError, ConfigError) as error:
        print(f"vllm-sim: invalid configuration: {error}", file=sys.stderr)
        return 2
    log = logging.getLogger("vllm_sim")
    for level, message in notes:
        log.log(level, message)
    for choice in tokenizers.values():
        log.log(choice.level, choice.message)
    try:
        instances = []
        for (_, port, rank), (cfg, timing), choice in zip(members, timed, choices, strict=True):
            step_model = None
            if timing is not None:
                log.info("Step engine: %s", timing.description)
                for warning in timing.warnings:
                    log.warning("%s", warning)
                step_model = timing.model
            try:
                instances.append(build_instance(cfg, port, rank, choice.tokenizer, step_model))
            except DatasetSetupError as error:
                print(f"vllm-sim: {error}", file=sys.stderr)
                return 2
        return serve_all(instances, members[0][0].host, tls)
    finally:
        if tls is not None:
            tls.close()


if __name__ == "__main__":
    sys.exit(main())
