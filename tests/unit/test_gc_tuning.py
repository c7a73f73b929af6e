"""The opt-in collector settings of a service process: applied once, restored exactly."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from ai_tools.errors import ConfigError
from ai_tools.standalone.gc_tuning import ENV_GC, SERVICE_THRESHOLDS, GCTuning, tuning_from_environ


@pytest.fixture(autouse=True)
def collector_untouched() -> Iterator[None]:
    """Whatever a test does, the process's collector settings are back afterwards."""
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    yield
    gc.set_threshold(*before)
    if gc.get_freeze_count() != frozen:
        gc.unfreeze()


def test_apply_then_restore() -> None:
    """Thresholds set and start-up objects frozen; restore puts everything back."""
    before = gc.get_threshold()
    tuning = GCTuning()
    tuning.apply()
    assert tuning.applied
    assert gc.get_threshold() == SERVICE_THRESHOLDS
    assert gc.get_freeze_count() > 0
    tuning.apply()  # once only: a second apply must not remember the tuned values
    tuning.restore()
    assert not tuning.applied
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    tuning.restore()  # harmless
    assert gc.get_threshold() == before


def test_without_freeze_nothing_is_frozen() -> None:
    tuning = GCTuning(thresholds=(5000, 20, 20), freeze=False)
    tuning.apply()
    assert gc.get_threshold() == (5000, 20, 20)
    assert gc.get_freeze_count() == 0
    tuning.restore()


@pytest.mark.parametrize("value", ["", "off", "0", "false", "  OFF "])
def test_unset_or_off_means_no_tuning(value: str) -> None:
    assert tuning_from_environ({ENV_GC: value}) is None
    assert tuning_from_environ({}) is None


@pytest.mark.parametrize(
    ("value", "thresholds"),
    [
        ("service", SERVICE_THRESHOLDS),
        ("on", SERVICE_THRESHOLDS),
        ("50000", (50000, *SERVICE_THRESHOLDS[1:])),
        ("50000,5", (50000, 5, SERVICE_THRESHOLDS[2])),
        ("1000, 20, 30", (1000, 20, 30)),
    ],
)
def test_values_that_ask_for_tuning(value: str, thresholds: tuple[int, int, int]) -> None:
    tuning = tuning_from_environ({ENV_GC: value})
    assert tuning is not None
    assert tuning.thresholds == thresholds and tuning.freeze


@pytest.mark.parametrize("value", ["fast", "1,2,3,4", "0", "-5", "100,x", "100,0"])
def test_bad_values_are_a_clear_error(value: str) -> None:
    if value == "0":  # "0" means off
        assert tuning_from_environ({ENV_GC: value}) is None
        return
    with pytest.raises(ConfigError, match=ENV_GC):
        tuning_from_environ({ENV_GC: value})
