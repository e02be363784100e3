"""trl_args passes the checkpointing setting under its current name (no deprecated alias)."""
import warnings

import pytest

pytest.importorskip("trl")


@pytest.mark.parametrize("kw, expected", [({}, None), ({"gradient_checkpointing": False}, False),
                                          ({"activation_checkpointing": False}, False)])
def test_trl_args_keeps_the_setting_without_the_deprecated_alias(kw, expected, tmp_path):
    from trl import DPOConfig

    from iclr26.models.lora import trl_args
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        args = trl_args(DPOConfig, tmp_path, **kw)
    if expected is None:  # nothing passed: TRL's own default for the setting, unchanged
        import dataclasses
        expected = {f.name: f.default for f in dataclasses.fields(DPOConfig)}["gradient_checkpointing"]
    assert args.activation_checkpointing is expected and args.gradient_checkpointing is expected
