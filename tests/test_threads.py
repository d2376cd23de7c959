"""The thread count of model preparation: one intra-op thread, the caller's count restored."""

import pytest
import torch

import dcd_deploy.models
from dcd_deploy._threads import PREPARATION_THREADS, preparation_threads
from dcd_deploy.checkpoint import resolve_model


@pytest.fixture
def caller_threads():
    """The caller runs with a count other than the preparation count (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(PREPARATION_THREADS + 2)
    yield PREPARATION_THREADS + 2
    torch.set_num_threads(before)


def test_body_runs_at_the_preparation_count_and_the_callers_returns(caller_threads):
    with preparation_threads():
        assert torch.get_num_threads() == PREPARATION_THREADS
    assert torch.get_num_threads() == caller_threads


def test_count_is_restored_when_the_body_raises(caller_threads):
    with pytest.raises(KeyError), preparation_threads(2):
        assert torch.get_num_threads() == 2
        raise KeyError("x")
    assert torch.get_num_threads() == caller_threads


def test_zoo_model_is_built_and_pseudo_trained_at_the_preparation_count(monkeypatch, caller_threads):
    seen = {}
    real_create, real_train = dcd_deploy.models.create_model, dcd_deploy.models.pseudo_train

    def create(name, **kwargs):
        seen["create"] = torch.get_num_threads()
        return real_create(name, **kwargs)

    def train(model, seed=0, **kwargs):
        seen["pseudo_train"] = torch.get_num_threads()
        return real_train(model, seed, **kwargs)

    monkeypatch.setattr(dcd_deploy.models, "create_model", create)
    monkeypatch.setattr(dcd_deploy.models, "pseudo_train", train)
    model = resolve_model("mobilenetv2_035_dcd", seed=3, input_size=32)
    assert seen == {"create": PREPARATION_THREADS, "pseudo_train": PREPARATION_THREADS}
    assert torch.get_num_threads() == caller_threads

    # The same weights as pseudo-training directly at that count: the commands (separate
    # processes) all see this model whatever the machine's default count is.
    with preparation_threads():
        expected = real_train(real_create("mobilenetv2_035_dcd"), 3, input_size=32).state_dict()
    got = model.state_dict()
    assert list(got) == list(expected)
    assert all(torch.equal(got[k], v) for k, v in expected.items())
