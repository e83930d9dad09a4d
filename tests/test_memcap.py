import pytest

from verl_p40.memcap import fraction_for


def test_fraction_of_device_memory():
    assert fraction_for(24, 150_110_000_000) == pytest.approx(24e9 / 150.11e9)
    assert fraction_for(200, 24_000_000_000) == 1.0
    with pytest.raises(ValueError):
        fraction_for(0, 10)
