"""`python -m rollout_bench <command> ...` (rules call these): each area's cli module registers its
commands with `add_commands`; this only dispatches, and turns a config or gate error into one line."""
import argparse
import sys


def main(argv=None):
    from .assets import cli as assets_cli
    from .assets.warm_card import GateError
    from .grpo import cli as grpo_cli
    from .pipeline import cli as pipeline_cli
    from .pipeline.config import ConfigError
    from .report import cli as report_cli

    ap = argparse.ArgumentParser(prog="python -m rollout_bench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for commands in (assets_cli, grpo_cli, pipeline_cli, report_cli):
        commands.add_commands(sub)
    a = ap.parse_args(argv)
    try:
        a.fn(a)
    except (ConfigError, GateError) as e:  # one clear line on stderr, non-zero exit, no output written
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
