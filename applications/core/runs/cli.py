"""What the example scripts share around their work: their common flags (``--strategy`` / ``--precision`` /
``--tpu`` / ``--mesh`` / ``--sharding``: :func:`add_runtime_arguments`; ``--epochs`` / ``--minutes``:
:func:`add_budget_arguments`), the runtime they start (:func:`start_runtime`), and problems a user caused ending
as one line on stderr and exit status 2, never a traceback.

    def main(argv=None):
        return run_script(PROG, parse_args, run, argv)      # run raises UsageError for the user's mistakes
"""

from __future__ import annotations

import sys

from .runtime import PRECISIONS, STRATEGIES, canonical_strategy  # keras, not TensorFlow


__all__ = ["UNBOUNDED_EPOCHS", "UsageError", "add_budget_arguments", "add_runtime_arguments", "budget_epochs",
           "check_budget_arguments", "check_sampling_arguments", "load_corpus", "run_script", "runtime_from_args",
           "start_runtime", "usage_error"]


class UsageError(Exception):
    """A problem with the command line or the data that the user can fix: one line, exit status 2."""


def usage_error(error):
    """A ``UsageError`` of one line for an ``OSError`` (naming its file) or a ``ValueError`` from a reader."""
    if isinstance(error, OSError) and error.filename:
        return UsageError(f"{error.filename}: {error.strerror or error}")
    return UsageError(" ".join(str(error).split()))


def add_runtime_arguments(parser):
    """Adds ``--strategy``, ``--precision``, ``--tpu``, ``--mesh`` and ``--sharding`` (a "runtime" argument group)
    to an ``argparse`` parser; read them back with :func:`runtime_from_args`. Returns the parser.

    Args:
        parser: an ``argparse.ArgumentParser``.
    """
    group = parser.add_argument_group("runtime (where and in what precision the model trains)")
    group.add_argument(
        "--strategy", type=canonical_strategy, choices=STRATEGIES, default="none",
        help="none (one device); data-parallel (every local device: keras.distribution.DataParallel under "
             "KERAS_BACKEND=jax, MirroredStrategy under tensorflow); JAX only: model-parallel "
             "(keras.distribution.ModelParallel over --mesh, weights split as --sharding says); TensorFlow only: "
             "mirrored (MirroredStrategy over all local GPUs, or the logical CPUs), multi-worker "
             "(MultiWorkerMirroredStrategy; set TF_CONFIG on every worker), tpu (TPUStrategy; see --tpu) "
             "(default: none)",
    )
    group.add_argument("--mesh", default=None, metavar="DATAxMODEL",
                       help="with --strategy model-parallel: the device mesh, e.g. 2x4 (8 devices: each batch split "
                            "over 2, each large weight over 4); DATA x MODEL must be the device count, and "
                            "--batch-size a multiple of DATA (docs/guides/model-parallelism.md)")
    group.add_argument("--sharding", choices=("tensor", "fsdp"), default=None,
                       help="with --strategy model-parallel: tensor (Megatron: Q/K/V and the first MLP matmul split "
                            "by columns, the attention output and second MLP matmul by rows) or fsdp (every matrix "
                            "split along its d_model axis, gathered where used) (default: tensor)")
    group.add_argument(
        "--precision", choices=PRECISIONS, default="float32",
        help="Keras dtype policy: float32, mixed_float16 (GPUs; loss scaling is automatic) or mixed_bfloat16 "
             "(TPUs, recent CPUs/GPUs); variables stay float32 (default: float32)",
    )
    group.add_argument("--tpu", default=None, metavar="NAME",
                       help="with --strategy tpu: the TPU name or grpc:// address (default: a local TPU VM)")
    return parser


def runtime_from_args(args, layout=None):
    """``runtime.setup_runtime`` from the flags of :func:`add_runtime_arguments`; ``layout``: the model's layout
    function for ``--strategy model-parallel`` (an application's ``sharding.layout_map``).

    Args:
        args: the parsed flags (``argparse.Namespace``).
        layout: the model's layout function for ``--strategy model-parallel``; None otherwise.
    """
    from .runtime import setup_runtime

    return setup_runtime(args.strategy, args.precision, tpu=getattr(args, "tpu", None),
                         mesh=getattr(args, "mesh", None), sharding=getattr(args, "sharding", None) or "tensor",
                         layout=layout)


def start_runtime(args, layout=None):
    """The ``tf.distribute`` strategy (under JAX: the ``runtime.JaxRuntime``) and precision of ``--strategy`` /
    ``--precision`` (``runtime_from_args``, before any other TensorFlow op), then the seed ``args.seed``; a value the
    runtime refuses, ``--mesh`` / ``--sharding`` without ``--strategy model-parallel``, or a ``--batch-size`` that does
    not split over JAX's devices, is a UsageError.

    Args:
        args: the parsed flags.
        layout: for ``--strategy model-parallel``, the model's layout function ``layout(mesh, style=...)`` (an
            application's ``sharding.layout_map``, or a ``functools.partial`` of it with the model's config); a
            script without one refuses that strategy.
    """
    import keras

    from .replicas import check_batch_size

    for flag in ("mesh", "sharding"):
        if getattr(args, flag, None) is not None and args.strategy != "model-parallel":
            raise UsageError(f"--{flag} applies to --strategy model-parallel only (this run: --strategy "
                             f"{args.strategy}).")
    try:
        strategy = runtime_from_args(args, layout)
        if getattr(args, "batch_size", None) is not None:
            check_batch_size(strategy, args.batch_size)
    except ValueError as error:
        raise UsageError(str(error)) from None
    keras.utils.set_random_seed(args.seed)
    return strategy


def load_corpus(corpus, read_text_documents, *, seed=0):
    """The documents of ``--corpus``: one source, or several joined by "+" (their documents in that order):
    "kjv" (the King James Bible, a document per chapter: ``corpora.bible_documents``), "tweets" (the sentiment
    task's training tweets at ``seed``, none of its validation or test ones: ``corpora.tweet_documents``) or
    "text:PATH" (``read_text_documents(PATH)``, the application's reader). Problems the user can fix (a missing
    package or file, an unreadable file, another value) raise a one-line :class:`UsageError`."""
    import os

    from ..inputs import corpora

    parts = corpus.split("+")
    for part in parts:  # every part checked before any is read: a typo costs no corpus read
        scheme, _, path = part.partition(":")
        if part not in ("kjv", "tweets") and not (scheme == "text" and path):
            raise UsageError(f"--corpus {corpus}: expected kjv, tweets or text:PATH, or several joined by + "
                             f"(kjv+tweets); received {part!r}")
        if scheme == "text" and not os.path.isfile(os.path.expanduser(path)):
            raise UsageError(f"--corpus {corpus}: {path}: no such file")
    documents = []
    for part in parts:
        try:
            if part == "kjv":
                documents += corpora.bible_documents()
            elif part == "tweets":
                documents += corpora.tweet_documents(seed=seed)
            else:
                documents += read_text_documents(os.path.expanduser(part.partition(":")[2]))
        except (OSError, ValueError) as error:
            raise usage_error(error) from None
    return documents


#: The epochs of a run bounded by ``--minutes`` alone: as many as the budget allows.
UNBOUNDED_EPOCHS = 100_000


def budget_epochs(epochs, minutes, default):
    """The ``epochs`` for ``fit`` of ``--epochs`` / ``--minutes``, the one meaning every script gives them:
    ``epochs`` when given (``minutes`` may still stop sooner); else ``default`` without a budget, and as many as
    the budget allows (:data:`UNBOUNDED_EPOCHS`) with one."""
    if epochs is not None:
        return epochs
    return UNBOUNDED_EPOCHS if minutes is not None else default


def add_budget_arguments(parser, default_epochs, unit):
    """Adds ``--epochs``, ``--minutes`` and ``--backup-every`` with the meaning every example script gives them (read
    them back with :func:`budget_epochs`; check them with :func:`check_budget_arguments`): ``--minutes`` alone trains
    until the budget ends, ``--epochs`` alone runs that many epochs, both stop at whichever comes first."""
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"passes over the {unit} (default: {default_epochs} without --minutes; with --minutes, "
                             "as many as the budget allows)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="train until this many minutes of training have passed (checked after every step; "
                             "each epoch's validation still runs); with --epochs, whichever ends first. Evaluation, "
                             "pictures and export come after training and are not counted. A run resumed from "
                             "OUT's backup gets what the interrupted one had left")
    parser.add_argument("--backup-every", type=int, default=None, metavar="STEPS",
                        help="back up OUT/backup every STEPS training steps, besides at the end of every epoch "
                             "(default: every 5 minutes of training); killed, the same command resumes at the "
                             "step of the last backup, with the weights an uninterrupted run would have")
    return parser


def check_budget_arguments(parser, args):
    """``parser.error`` for an ``--epochs`` below 1, a ``--minutes`` that is not a positive number or a
    ``--backup-every`` below 1."""
    if args.epochs is not None and args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if args.minutes is not None and not args.minutes > 0:
        parser.error("--minutes must be a positive number")
    if getattr(args, "backup_every", None) is not None and args.backup_every < 1:
        parser.error("--backup-every must be at least 1 (steps)")


def check_sampling_arguments(parser, args):
    """``parser.error`` for a ``--temperature`` below 0, a ``--top-k`` below 0 or a ``--top-p`` outside (0, 1]: the
    sampling flags of the generating scripts."""
    if not args.temperature >= 0:
        parser.error(f"--temperature must be >= 0 (0 = greedy); received {args.temperature}")
    if args.top_k < 0:
        parser.error(f"--top-k must be >= 0 (0 = off); received {args.top_k}")
    if not 0 < args.top_p <= 1:
        parser.error(f"--top-p must be in (0, 1] (1 = off); received {args.top_p}")


def run_script(prog, parse_args, run, argv=None):
    """``run(parse_args(argv))``; a :class:`UsageError` prints ``"PROG: error: ..."`` to stderr and returns 2."""
    args = parse_args(argv)
    try:
        return run(args)
    except UsageError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
