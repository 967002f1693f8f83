"""attnlayers: attention layers for Keras 3.

Every classic scoring function, soft / local / hard attention, attention pooling and the mask algebra they
share. All math is in ``keras.ops``, so the layers run under the TensorFlow and JAX backends.
"""

from attnlayers import masking, scoring
from attnlayers.attention import Attention, AttentionBase, AttentionPooling
from attnlayers.hard import GumbelTemperatureSchedule, HardAttention, ReinforceModel
from attnlayers.local import LocalAttention
from attnlayers.scoring import (
    AdditiveScore,
    CosineScore,
    DotScore,
    GeneralScore,
    LocationScore,
    MLPScore,
    ScaledDotScore,
    Score,
    available_scores,
    get_score,
    register_score,
)

__version__ = "0.1.0"
