"""load_inputs: the user's images from .npy / .pt, checked before they are used."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dcd_deploy.errors import UnsupportedInputError
from dcd_deploy.inputs import MAX_IMAGES, load_inputs


def test_npy_and_pt_of_any_float_dtype_load_as_float32(tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 8))
    for dtype in (np.float16, np.float32, np.float64):
        np.save(tmp_path / "x.npy", x.astype(dtype))
        got = load_inputs(tmp_path / "x.npy", input_size=8)
        assert got.dtype == torch.float32 and got.shape == (3, 3, 8, 8)
        assert np.allclose(got.numpy(), x.astype(dtype).astype(np.float32))
    torch.save(torch.from_numpy(x), tmp_path / "x.pt")
    assert torch.equal(load_inputs(tmp_path / "x.pt"), torch.from_numpy(x).float())


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda p: torch.save({"x": torch.zeros(1, 3, 8, 8)}, p.with_suffix(".pt")), "holds a dict, not one tensor"),
        (lambda p: p.with_suffix(".pt").write_bytes(b"garbage"), "cannot read inputs file"),
        (lambda p: np.save(p.with_suffix(".npy"), np.zeros((0, 3, 8, 8), np.float32)), "empty tensor"),
        (lambda p: np.save(p.with_suffix(".npy"), np.zeros((1, 3, 8, 8), complex)), "expected floating-point"),
        (lambda p: p.with_suffix(".txt").write_text("1 2 3"), "expected a .npy or .pt file"),
    ],
)
def test_what_is_not_a_batch_of_images_is_refused(tmp_path, write, message):
    write(tmp_path / "in")
    path = next(tmp_path.iterdir())
    with pytest.raises(UnsupportedInputError, match=message):
        load_inputs(path)


def test_object_arrays_are_never_unpickled(tmp_path):
    np.save(tmp_path / "o.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(UnsupportedInputError, match="not a readable NumPy"):
        load_inputs(tmp_path / "o.npy")


def test_image_count_is_bounded_before_reading(tmp_path):
    # a header claiming MAX_IMAGES + 1 images; memory-mapped, so nothing is allocated
    arr = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.float32, shape=(MAX_IMAGES + 1, 3, 1, 1))
    del arr
    with pytest.raises(UnsupportedInputError, match=f"at most {MAX_IMAGES}"):
        load_inputs(tmp_path / "big.npy")


def test_directory_is_not_an_inputs_file(tmp_path):
    with pytest.raises(UnsupportedInputError, match="is not a regular file"):
        load_inputs(tmp_path)


def test_images_of_other_channel_counts(tmp_path):
    from dcd_deploy.inputs import load_images

    grey = np.random.default_rng(1).normal(size=(2, 8, 10, 1)).astype(np.float32)
    np.save(tmp_path / "g.npy", grey)
    images, described = load_images(tmp_path / "g.npy", input_size=(8, 10), channels=1)
    assert torch.equal(images, torch.from_numpy(grey).permute(0, 3, 1, 2)) and "NHWC" in described
    np.save(tmp_path / "u.npy", (grey * 0 + 7).astype(np.uint8))
    with pytest.raises(UnsupportedInputError, match="preprocessing presets describe 3-channel images"):
        load_images(tmp_path / "u.npy", channels=1)
    with pytest.raises(UnsupportedInputError, match="expected N x 3 x H x W or N x H x W x 3"):
        load_images(tmp_path / "g.npy")  # a grey batch for an RGB model


def test_one_image_without_a_batch_axis_is_a_batch_of_one(tmp_path):
    # cv2.imread's H x W x 3 pixels, or a C x H x W float image, saved as they are
    from dcd_deploy.inputs import load_images

    rng = np.random.default_rng(2)
    pixels = rng.integers(0, 256, (8, 10, 3), dtype=np.uint8)
    np.save(tmp_path / "one.npy", pixels)
    np.save(tmp_path / "batch.npy", pixels[None])
    one, _ = load_images(tmp_path / "one.npy", input_size=(8, 10))
    batch, _ = load_images(tmp_path / "batch.npy", input_size=(8, 10))
    assert one.shape == (1, 3, 8, 10) and torch.equal(one, batch)
    chw = rng.standard_normal((3, 8, 10)).astype(np.float32)
    np.save(tmp_path / "chw.npy", chw)
    got, _ = load_images(tmp_path / "chw.npy", input_size=(8, 10))
    assert torch.equal(got, torch.from_numpy(chw)[None])
    np.save(tmp_path / "flat.npy", np.zeros((8, 10), np.float32))  # no channel axis: not an image
    with pytest.raises(UnsupportedInputError, match=r"shape \(8, 10\); expected N x 3 x H x W"):
        load_images(tmp_path / "flat.npy")


# -- sets of inputs: one array per forward argument --


def test_a_set_keeps_names_order_and_dtypes(tmp_path):
    from dcd_deploy.inputs import load_input_set, read_input_set

    rgb, ids = np.ones((2, 3, 4, 4), np.float64), np.array([3, 1], np.int64)
    np.savez(tmp_path / "named.npz", rgb=rgb, ids=ids)
    np.savez(tmp_path / "pos.npz", rgb, ids)
    torch.save([torch.from_numpy(rgb), torch.from_numpy(ids)], tmp_path / "list.pt")
    torch.save(torch.zeros(2, 3, 4, 4), tmp_path / "one.pt")
    named = load_input_set(tmp_path / "named.npz")
    assert named.names == ("rgb", "ids") and named.batch == 2
    assert named.tensors[0].dtype == torch.float32 and named.tensors[1].dtype == torch.int64
    assert named.tensors[1].tolist() == [3, 1]
    # by name, whatever order the caller wants them in
    assert [t.dtype for t in named.arrange(["ids", "rgb"], what="m")] == [torch.int64, torch.float32]
    for positional in ("pos.npz", "list.pt"):
        got = load_input_set(tmp_path / positional)
        assert got.names is None and [t.dtype for t in got.tensors] == [torch.float32, torch.int64]
    assert read_input_set(tmp_path / "list.pt").names is None and read_input_set(tmp_path / "named.npz").names
    assert read_input_set(tmp_path / "one.pt") is None  # one tensor: a batch of images, as before


def test_a_pt_of_nested_dicts_names_its_arrays_by_dotted_key(tmp_path):
    from dcd_deploy.inputs import load_input_set

    depth, image = torch.rand(2, 1, 4, 4), torch.rand(2, 3, 4, 4)
    torch.save({"image": image, "aux": {"depth": depth, "more": {"ir": depth + 1}}}, tmp_path / "b.pt")
    got = load_input_set(tmp_path / "b.pt")
    assert got.names == ("image", "aux.depth", "aux.more.ir")
    assert torch.equal(got.tensors[1], depth) and torch.equal(got.tensors[2], depth + 1)


def test_items_named_by_index_are_a_list_argument(tmp_path):
    from dcd_deploy.inputs import load_input_set

    a, b = torch.rand(2, 3, 4, 4), torch.rand(2, 3, 4, 4)
    torch.save({"views": (a, b), "meta": {"1": a, "2": b}}, tmp_path / "v.pt")
    got = load_input_set(tmp_path / "v.pt")
    assert got.names == ("views.0", "views.1", "meta.1", "meta.2")
    (arg,) = got.as_dicts(["batch"])  # one argument that no array names: a dict of them all
    assert isinstance(arg["views"], list) and arg["views"][1] is got.tensors[1]
    assert sorted(arg["meta"]) == ["1", "2"]  # keys not 0..n-1 stay a dict


def test_np_savez_positions_sort_as_numbers(tmp_path):
    from dcd_deploy.inputs import load_input_set

    arrays = [np.full((1, 2), i, np.float32) for i in range(12)]
    np.savez(tmp_path / "many.npz", *arrays)  # arr_10 sorts before arr_2 as text
    got = load_input_set(tmp_path / "many.npz")
    assert [int(t[0, 0]) for t in got.tensors] == list(range(12))


def _object_npz(path):
    np.savez(path, a=np.array([{"x": 1}], dtype=object))


def _huge_header_npz(path):
    """A member whose header claims 10^10 floats over 16 bytes of data."""
    import io
    import zipfile

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (100000, 100000)})
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a.npy", buf.getvalue() + b"\0" * 16)


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda p: np.savez(p, a=np.zeros((2, 3)), b=np.zeros((3, 3))), r"the same batch \(at least 1\) on axis 0"),
        (lambda p: np.savez(p), "holds no arrays"),
        (_object_npz, r"member a\.npy is not an array of numbers \(object\)"),
        (lambda p: np.savez(p, a=np.array(["x", "y"])), r"member a\.npy is not an array of numbers \(<U1\)"),
        (_huge_header_npz, "at most 67108864 are checked"),
        (lambda p: p.write_bytes(b"PK\x03\x04 not really"), "not a readable NumPy .npz file"),
    ],
)
def test_a_bad_set_is_refused_before_it_is_read(tmp_path, write, message):
    from dcd_deploy.inputs import load_input_set

    path = tmp_path / "in.npz"
    write(path)
    with pytest.raises(UnsupportedInputError, match=message):
        load_input_set(path)


def test_members_that_are_no_arrays_are_left_out(tmp_path):
    import zipfile

    from dcd_deploy.inputs import load_input_set

    np.savez(tmp_path / "in.npz", a=np.zeros((2, 3), np.float32))
    with zipfile.ZipFile(tmp_path / "in.npz", "a") as zf:
        zf.writestr("README.txt", "written by a user's script")
    got = load_input_set(tmp_path / "in.npz")
    assert got.names == ("a",) and got.tensors[0].shape == (2, 3)


def test_a_set_that_does_not_fit_names_what_is_wrong(tmp_path):
    from dcd_deploy.inputs import load_input_set

    np.savez(tmp_path / "in.npz", rgb=np.zeros((1, 3)), dept=np.zeros((1, 1)))
    with pytest.raises(
        UnsupportedInputError, match=r"holds rgb, dept; m takes rgb, depth \(missing: depth\) \(not taken: dept\)"
    ):
        load_input_set(tmp_path / "in.npz").arrange(["rgb", "depth"], what="m")
    np.savez(tmp_path / "pos.npz", np.zeros((1, 3)))
    with pytest.raises(UnsupportedInputError, match=r"holds 1 arrays; m takes 2 \(rgb, depth\)"):
        load_input_set(tmp_path / "pos.npz").arrange(["rgb", "depth"], what="m")


class _Batch(torch.nn.Module):
    def forward(self, batch):
        return batch["image"] * batch["mask"]


class _BatchAndGain(torch.nn.Module):
    def forward(self, batch, gain=None):
        return batch["img"] * gain


def test_named_arrays_become_the_dict_of_a_one_argument_forward(tmp_path):
    from dcd_deploy.inputs import InputSet

    image, mask, depth = torch.randn(2, 3, 4, 4), torch.ones(2, 1, 4, 4), torch.zeros(2, 1, 4, 4)
    given = InputSet((image, mask, depth), ("image", "mask", "aux.depth"), tmp_path / "in.npz")
    (batch,), names = given.for_model(_Batch())
    assert names is None and list(batch) == ["image", "mask", "aux"]
    assert batch["image"] is image and batch["aux"]["depth"] is depth


def test_arg_dot_key_arrays_go_into_that_arguments_dict(tmp_path):
    from dcd_deploy.inputs import InputSet

    img, gain = torch.randn(2, 3, 4, 4), torch.ones(2, 1, 1, 1)
    given = InputSet((gain, img), ("gain", "batch.img"), tmp_path / "in.npz")
    args, names = given.for_model(_BatchAndGain())
    assert names is None and args[0] == {"img": img} and args[1] is gain


def test_a_set_of_the_arguments_own_names_is_taken_as_before(tmp_path):
    from dcd_deploy.inputs import InputSet

    a, b = torch.randn(2, 3), torch.randn(2, 3)
    given = InputSet((b, a), ("gain", "batch"), tmp_path / "in.npz")
    assert given.for_model(_BatchAndGain()) == ((a, b), ["batch", "gain"])


@pytest.mark.parametrize("names", [("aux", "aux.depth"), ("aux.depth", "aux")])
def test_an_array_and_a_key_under_it_are_one_error(tmp_path, names):
    """``aux`` and ``aux.depth``: a tensor cannot hold a key (a TypeError traceback before)."""
    from dcd_deploy.inputs import InputSet

    given = InputSet((torch.zeros(2, 1), torch.zeros(2, 1)), names, tmp_path / "in.npz")
    with pytest.raises(UnsupportedInputError, match=r"^inputs: the array aux"):
        given.for_model(_Batch())


def test_load_inputs_takes_images_of_any_size(tmp_path):
    x = np.random.default_rng(3).standard_normal((2, 3, 6, 10)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert torch.equal(load_inputs(tmp_path / "x.npy", input_size=(6, 10)), torch.from_numpy(x))
    with pytest.raises(UnsupportedInputError, match="holds 6x10 images, but the model takes 8x8"):
        load_inputs(tmp_path / "x.npy", input_size=8)
