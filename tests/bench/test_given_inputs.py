"""The bench's runs of a model that takes a dict (``bench/_given_inputs.flat_run``)."""

from __future__ import annotations

import torch
from _dict_net import build


def test_a_batchs_entries_the_model_never_reads_are_not_timed_inputs():
    """A loader's batch with a label: the label is no input of the runs (nor of the file
    the bench exports from the view), as ``dcd-export`` leaves it out."""
    from dcd_deploy.bench._given_inputs import flat_run

    model = build().eval()
    batch = {"image": torch.randn(2, 3, 16, 16), "label": torch.arange(2), "mask": torch.ones(2, 1, 16, 16)}
    flat, views, unread = flat_run((batch,), {"dcd": model})
    assert len(flat) == 2 and unread == ("label",)
    assert flat[0] is batch["image"] and flat[1] is batch["mask"]
    with torch.no_grad():
        assert torch.equal(views["dcd"](*flat), model(batch))
