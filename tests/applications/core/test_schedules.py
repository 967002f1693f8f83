"""Learning-rate schedules against their equations."""

import math

import pytest

from attnlayers.applications.core import TransformerSchedule, WarmupCosineDecay


def test_transformer_schedule_is_equation_3():
    schedule = TransformerSchedule(512, warmup_steps=4000)
    for step in (1, 100, 4000, 16000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-5)  # optimizer iterations count from 0
    peak = float(schedule(3999))
    assert peak == pytest.approx((512 * 4000) ** -0.5, rel=1e-5)
    assert float(schedule(1000)) < peak and float(schedule(8000)) < peak
    assert float(TransformerSchedule(512, 4000, scale=0.5)(3999)) == pytest.approx(peak / 2, rel=1e-5)
    assert TransformerSchedule.from_config(schedule.get_config()).get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="warmup_steps"):
        TransformerSchedule(512, warmup_steps=0)


def test_warmup_cosine_decay_scales_its_warmup_with_the_run():
    schedule = WarmupCosineDecay(1e-3, total_steps=1000, warmup_fraction=0.1, final=0.1)
    assert schedule.warmup_steps == 100
    assert float(schedule(49)) == pytest.approx(1e-3 * 50 / 100, rel=1e-5)  # linear warm-up
    assert float(schedule(99)) == pytest.approx(1e-3, rel=1e-5)  # the peak at the end of the warm-up
    middle = 1e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert float(schedule(549)) == pytest.approx(middle, rel=1e-4)
    assert float(schedule(999)) == pytest.approx(1e-4, rel=1e-4) == float(schedule(5000))  # then stays final
    assert WarmupCosineDecay(1e-3, total_steps=100).warmup_steps == 10  # a shorter run warms up for less
    assert WarmupCosineDecay.from_config(schedule.get_config()).get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="warmup_fraction"):
        WarmupCosineDecay(1e-3, 100, warmup_fraction=1.0)
    with pytest.raises(ValueError, match="total_steps"):
        WarmupCosineDecay(1e-3, 0)
