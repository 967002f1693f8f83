"""Reading a Hugging Face ``config.json`` into an application's config fields, with errors that name the file and
the key, and the checkpoint directory's files (shared by the BERT, GPT-2, LLaMA and XLNet checkpoint readers)."""

import os


__all__ = ["CONFIG_FILE", "WEIGHTS_FILE", "checkpoint_files", "hf_config_fields"]


def hf_config_fields(hf_config, source, *, required, optional, fixed=(), model="a"):
    """Our config's fields from a Hugging Face config dict.

    Args:
        hf_config: the config.json dict.
        source: what the errors name (the file).
        required: {Hugging Face key: our field}, keys that must be present.
        optional: {Hugging Face key: (our field, default)}: the default stands for an absent or null key (the
            Hugging Face config class's own default).
        fixed: (key, expected value, what it means) triples: an absent key counts as the expected value; any
            other value is refused (the architecture cannot represent it).
        model: how the error names the config ("a BERT", "a GPT-2"...).

    Returns:
        {our field: value}.

    Raises:
        ValueError: naming ``source`` and the missing keys, or the key whose value is not the one expected.
    """
    missing = [key for key in required if key not in hf_config]
    if missing:
        raise ValueError(f"{source}: missing {missing}; {model} config.json names {list(required)}.")
    for key, expected, what in fixed:
        if hf_config.get(key, expected) != expected:
            raise ValueError(f"{source}: `{key}` must be {expected!r} ({what}); received {hf_config[key]!r}.")
    fields = {ours: hf_config[key] for key, ours in required.items()}
    for key, (ours, default) in optional.items():
        value = hf_config.get(key)
        fields[ours] = default if value is None else value
    return fields


CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


def checkpoint_files(directory, model):
    """``(config_path, weights_path)`` of a Hugging Face checkpoint directory (config.json + model.safetensors),
    checked to exist; ``model`` names the checkpoint in the error ("BERT", "GPT-2", ...).

    Raises:
        ValueError: naming the missing file and what it holds, with what to do for a sharded or a
            pytorch_model.bin-only checkpoint.
    """
    config_path, weights_path = os.path.join(directory, CONFIG_FILE), os.path.join(directory, WEIGHTS_FILE)
    for path, what in ((config_path, "the model's sizes"), (weights_path, "the weights")):
        if not os.path.isfile(path):
            hint = ""
            if path == weights_path:
                sharded = os.path.isfile(os.path.join(directory, WEIGHTS_FILE + ".index.json"))
                hint = (" (sharded model-*-of-*.safetensors files are not read: re-save with a max_shard_size above "
                        "the model's size)" if sharded else
                        " (a pytorch_model.bin-only checkpoint must be re-saved with safe_serialization)")
            raise ValueError(
                f"`directory` {directory!r} has no {os.path.basename(path)} ({what}){hint}; expected a Hugging Face "
                f"{model} checkpoint: {CONFIG_FILE} + {WEIGHTS_FILE}."
            )
    return config_path, weights_path
