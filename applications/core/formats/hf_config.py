"""Reading a Hugging Face ``config.json`` into an application's config fields, with errors that name the file and
the key (shared by the BERT, GPT-2 and LLaMA checkpoint readers)."""


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
