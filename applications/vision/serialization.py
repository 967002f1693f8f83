"""The config round trip the vision models share: their sizes, a config dataclass, saved under one "config" key."""

from __future__ import annotations

import dataclasses


class DataclassConfigMixin:
    """``get_config`` / ``from_config`` of a ``keras.Model`` whose constructor takes ``config=`` (a config dataclass
    or a dict of its fields) and keeps it as ``self.config``: saved as a dict of the fields under "config".

    Put it before ``keras.Model`` in the bases.
    """

    def get_config(self):
        return {**super().get_config(), "config": dataclasses.asdict(self.config)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(config=config.pop("config"), **config)


__all__ = ["DataclassConfigMixin"]
