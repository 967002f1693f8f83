"""The scripts' scheduled-sampling flags, defined once (examples/train_nmt.py, examples/train_captioning.py,
benchmarks/scheduled_sampling.py):

    --scheduled-sampling SCHEDULE        inverse_sigmoid:K | exponential:K | linear:K,C[,EPSILON] | none
    --scheduled-sampling-prediction P    sample (default, Bengio et al.'s figure 1) | argmax

    add_scheduled_sampling_arguments(parser)
    args = parser.parse_args(); check_scheduled_sampling_arguments(parser, args)
    model = build(..., scheduled_sampling=model_argument(args))            # in the strategy's scope
    callbacks = logger_callbacks(model) + core.standard_callbacks(...)      # eps_i in TensorBoard and the history
"""

from __future__ import annotations

from attnlayers import scheduled_sampling

FLAG = "--scheduled-sampling"
HELP = ("scheduled sampling (Bengio et al. 2015) in training: at each decoder step the true previous token with "
        "probability eps_i, else the model's own, eps_i decaying with the training step i: inverse_sigmoid:K (k / (k "
        "+ exp(i / k)), K >= 1, e.g. inverse_sigmoid:1000), exponential:K (k^i, 0 < K < 1, e.g. exponential:0.9999) "
        "or linear:K,C[,EPSILON] (max(epsilon, k - c i), e.g. linear:1,1e-4,0.1); none (default): teacher forcing. "
        "The Transformer mixes a first decoder pass's predictions into its inputs (Mihaylova & Martins 2019). eps_i "
        "is logged as scheduled_sampling_epsilon (TensorBoard, results.json)")


def add_scheduled_sampling_arguments(parser):
    """Adds ``--scheduled-sampling`` and ``--scheduled-sampling-prediction`` to an ``argparse`` parser."""
    parser.add_argument(FLAG, default=None, metavar="SCHEDULE", help=HELP)
    parser.add_argument(f"{FLAG}-prediction", choices=scheduled_sampling.PREDICTIONS, default="sample",
                        help="with --scheduled-sampling: the model's token, sampled from its softmax (default, as in "
                             "the paper) or its argmax")
    return parser


def check_scheduled_sampling_arguments(parser, args, supported=True, why=""):
    """``parser.error`` for a schedule that does not parse (the error says the expected forms) or a model that cannot
    use it (``supported`` False; ``why`` names the models that can). Sets ``args.scheduled_sampling`` to the
    canonical spec (``"inverse_sigmoid:1000"``) or None for none."""
    spec = args.scheduled_sampling
    if spec is None or spec.strip().lower() in ("", "none", "off"):
        args.scheduled_sampling = None
        return args
    try:
        args.scheduled_sampling = scheduled_sampling.get(spec).spec()
    except ValueError as error:
        parser.error(f"{FLAG} {spec}: {error}")
    if not supported:
        parser.error(f"{FLAG} applies to {why}")
    return args


def model_argument(args, seed=None):
    """The model constructors' ``scheduled_sampling`` argument for the parsed flags (None when off): build the
    model in the strategy's scope, where the sampler's variables are made."""
    if getattr(args, "scheduled_sampling", None) is None:
        return None
    return {"schedule": args.scheduled_sampling, "prediction": args.scheduled_sampling_prediction,
            "seed": getattr(args, "seed", None) if seed is None else seed}


def logger_callbacks(model):
    """``[ScheduledSamplingLogger()]`` for a model with scheduled sampling (put it before TensorBoard), else []."""
    return [scheduled_sampling.ScheduledSamplingLogger()] if scheduled_sampling.find_samplers(model) else []


__all__ = ["add_scheduled_sampling_arguments", "check_scheduled_sampling_arguments", "logger_callbacks",
           "model_argument"]
