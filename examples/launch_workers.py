"""Run a training command as a local multi-worker cluster: N copies on this machine, each with its TF_CONFIG
(the workers' addresses on 127.0.0.1 and its own index), their output prefixed "[worker i]", and the whole group
started again after a failure, when --max-restarts allows, so that BackupAndRestore resumes from the last backup.

    python examples/launch_workers.py --workers 2 -- python examples/train_nmt.py --strategy multi-worker --minutes 5
    python examples/launch_workers.py --workers 2 --max-restarts 3 -- python examples/train_gpt.py --strategy multi-worker

Every worker runs the same command; worker 0 is the chief (it writes the checkpoints and TensorBoard logs). On
several machines, set on each the TF_CONFIG this script would write, with the machines' addresses:
{"cluster": {"worker": ["host0:port", "host1:port"]}, "task": {"type": "worker", "index": I}}.
"""

import argparse
import os
import sys

PROG = os.path.basename(__file__)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="how many local workers (default 2)")
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="how many times a failed group is started again (default 0)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the training command, after --")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the training command after --, e.g. -- python examples/train_nmt.py --strategy multi-worker")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.max_restarts < 0:
        parser.error("--max-restarts must be at least 0")
    return args


def main(argv=None):
    from attnlayers.applications.core.runs.launch import launch_workers

    args = parse_args(argv)
    return launch_workers(args.command, args.workers, max_restarts=args.max_restarts)


if __name__ == "__main__":
    sys.exit(main())
