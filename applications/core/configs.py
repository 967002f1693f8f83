"""The one way every application reads a config argument (``BertConfig.of``, ``XLNetConfig.of``, ...)."""

import dataclasses


__all__ = ["config_of"]


def config_of(cls, config):
    """``config`` as a ``cls`` (a dataclass with a ``preset(name)`` classmethod): an instance, a dict of its fields, a
    preset name, or None (the defaults: the tiny size).

    Raises:
        ValueError: for unknown fields, or for anything else than the four accepted kinds (``preset`` names its
            own presets).
    """
    name = cls.__name__
    if config is None:
        return cls()
    if isinstance(config, cls):
        return config
    if isinstance(config, str):
        return cls.preset(config)
    if isinstance(config, dict):
        unknown = sorted(set(config) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"Unknown {name} fields {unknown}.")
        return cls(**config)
    article = "an" if name[0] in "AEIOUX" else "a"
    raise ValueError(
        f"`config` must be {article} {name}, a dict of its fields, a preset name or None; received "
        f"{type(config).__name__}."
    )
