"""Result.to_vllm() against what vLLM does with it, step by step (vLLM cannot be installed here: too heavy).

Mirrored from vLLM's source (main branch, the 0.33 series; files at the commits given):
- the chat content part: vllm/entrypoints/chat_utils.py @001eadcf: MM_PARSER_MAP["image_embeds"] takes
  part["image_embeds"] (a str or a dict of str) and part["uuid"]; MultiModalContentParser.parse_image_embeds
  decodes each dict value with MediaConnector.fetch_image_embedding; _resolve_items -> _get_embeds_data ->
  _merge_embeds gathers the parts: per key, _detect_field gives MultiModalBatchedField (torch.stack) when every
  part's tensor has the same shape, else MultiModalFlatField (torch.cat); then the model's
  _get_mm_fields_config (Qwen2-VL/Qwen3-VL: image_embeds flat_from_sizes(image_grid_thw.prod(-1) // merge²),
  image_grid_thw batched) overrides the guess, so embeddings are concatenated and grids stacked.
  The chat API has no "video_embeds" part type (MM_PARSER_MAP; anything else is "Unsupported chat content part
  type").
- the payload: vllm/multimodal/media/image.py @030958a2 ImageEmbeddingMediaIO.load_base64 ->
  pybase64.b64decode(data, validate=True) -> load_bytes: data[:6] == b"\\x93NUMPY" -> torch.from_numpy(np.load(...)),
  else torch.load(BytesIO(data), weights_only=True).to_dense().
- the check: vllm/model_executor/models/qwen2_5_vl.py Qwen2_5_VLImageEmbeddingInputs (Qwen3-VL's too):
  image_embeds TensorShape("nf", "hs"), image_grid_thw TensorShape("ni", 3); qwen3_vl.py splits each image's rows
  by grid.prod(-1) // merge² and its columns into [out_hidden, out_hidden·n_deepstack] (visual, DeepStack).
vLLM's own test (tests/entrypoints/test_chat_utils.py, test_parse_chat_messages_multiple_dict_image_embeds) sends
one part per image with a grid of shape (3,) and expects the merged grid (n_images, 3).
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest

import qvl

from conftest import PHOTO, data

MERGE = 2  # the tiny checkpoint's spatial_merge_size, as Qwen3-VL's


def vllm_load_base64(s: str, torch=None):
    """ImageEmbeddingMediaIO.load_base64 -> load_bytes (npy magic -> np.load, else torch.load weights_only)."""
    raw = base64.b64decode(s, validate=True)
    if raw[:6] == b"\x93NUMPY":
        return np.load(io.BytesIO(raw))  # np.load's default allow_pickle=False, as vLLM calls it
    assert torch is not None, "a torch.save payload needs torch to read"
    return torch.load(io.BytesIO(raw), weights_only=True).to_dense().numpy()


def vllm_merge(parts: list[dict], torch=None) -> tuple[dict[str, np.ndarray], list]:
    """The chat parser on image_embeds parts, through Qwen3-VL's field config: (mm_data["image"], uuids)."""
    items, uuids = [], []
    for p in parts:
        assert p["type"] == "image_embeds"  # a key of MM_PARSER_MAP
        v = p["image_embeds"]
        assert isinstance(v, dict)
        items.append({k: vllm_load_base64(x, torch) for k, x in v.items()})
        uuids.append(p.get("uuid"))
    keys = set(items[0])
    assert all(set(it) == keys for it in items), "All dictionaries ... must have the same keys"
    assert keys == {"image_embeds", "image_grid_thw"}
    grids = [it["image_grid_thw"] for it in items]
    # image_grid_thw: MultiModalFieldConfig.batched("image") -> stack of the parts' tensors
    grid = np.stack(grids)
    # image_embeds: flat_from_sizes -> the parts' tensors concatenated on the first axis
    embeds = np.concatenate([it["image_embeds"] for it in items], axis=0)
    return {"image_embeds": embeds, "image_grid_thw": grid}, uuids


def check_schema(mm: dict[str, np.ndarray], cols: int) -> None:
    """Qwen2_5_VLImageEmbeddingInputs' TensorSchema and Qwen3-VL's per-image split."""
    e, g = mm["image_embeds"], mm["image_grid_thw"]
    assert e.ndim == 2 and e.shape[1] == cols, e.shape  # (nf, hs)
    assert g.ndim == 2 and g.shape[1] == 3 and g.dtype == np.int64, (g.shape, g.dtype)  # (ni, 3)
    assert e.shape[0] == int((g.prod(-1) // MERGE**2).sum())


@pytest.fixture(scope="module")
def results(enc: qvl.Encoder) -> list[qvl.Result]:
    rs = enc.encode([PHOTO, data("tests/data/photos/coffee.png")])
    assert all(r.ok for r in rs) and rs[0].grid_thw != rs[1].grid_thw
    return rs


def test_npy_part_as_vllm_reads_it(results: list[qvl.Result]) -> None:
    parts = [r.to_vllm(encoding="npy")["content_part"] for r in results]
    for r, p in zip(results, parts):
        assert p["uuid"] == r.key
        grid = vllm_load_base64(p["image_embeds"]["image_grid_thw"])
        assert grid.shape == (3,), "one part's grid is (3,): vLLM stacks the parts' grids into (n, 3)"
    cols = results[0].out_hidden * (1 + results[0].n_deepstack)
    for chosen in ([parts[0]], parts):  # one image per request, and two
        mm, uuids = vllm_merge(chosen)
        check_schema(mm, cols)
        want = np.concatenate([r.embeds for r in results[: len(chosen)]])
        assert mm["image_embeds"].dtype == np.float32 and mm["image_embeds"].tobytes() == want.tobytes()
        assert [tuple(g) for g in mm["image_grid_thw"]] == [r.grid_thw for r in results[: len(chosen)]]
        assert uuids == [r.key for r in results[: len(chosen)]]


def test_npy_float16_and_errors(enc: qvl.Encoder) -> None:
    [r16] = enc.encode([PHOTO], dtype="float16")
    mm, _ = vllm_merge([r16.to_vllm(encoding="npy")["content_part"]])
    assert mm["image_embeds"].dtype == np.float16 and mm["image_embeds"].tobytes() == r16.embeds.tobytes()
    [rb] = enc.encode([PHOTO], dtype="bfloat16")
    with pytest.raises(ValueError, match="bfloat16"):
        rb.to_vllm(encoding="npy")
    with pytest.raises(ValueError):
        r16.to_vllm(encoding="pickle")
    [rs] = enc.encode([PHOTO], layout="split")  # split results give the same concat matrix
    mm2, _ = vllm_merge([rs.to_vllm(encoding="npy")["content_part"]])
    assert mm2["image_embeds"].tobytes() == enc.encode([PHOTO])[0].embeds.tobytes()


def test_video_has_no_chat_part(enc: qvl.Encoder) -> None:
    [v] = enc.encode([data("tests/data/video/video_testsrc_30.mp4")])
    assert v.ok and v.grid_thw[0] > 1
    out = v.to_vllm(encoding="npy")
    assert out["content_part"] is None  # vLLM's chat API has no video_embeds part


def test_torch_part_as_vllm_reads_it(results: list[qvl.Result], enc: qvl.Encoder) -> None:
    torch = pytest.importorskip("torch")
    parts = [r.to_vllm()["content_part"] for r in results]
    mm, uuids = vllm_merge(parts, torch)
    check_schema(mm, results[0].out_hidden * (1 + results[0].n_deepstack))
    assert mm["image_embeds"].tobytes() == np.concatenate([r.embeds for r in results]).tobytes()
    assert uuids == [r.key for r in results]
    off = results[0].to_vllm()["multi_modal_data"]["image"]
    assert tuple(off["image_grid_thw"].shape) == (1, 3) and off["image_grid_thw"].dtype == torch.int64
    assert tuple(off["image_embeds"].shape) == results[0].embeds.shape
    [rb] = enc.encode([PHOTO], dtype="bfloat16")
    raw = base64.b64decode(rb.to_vllm()["content_part"]["image_embeds"]["image_embeds"], validate=True)
    t = torch.load(io.BytesIO(raw), weights_only=True).to_dense()
    assert t.dtype == torch.bfloat16 and t.view(torch.int16).numpy().view(np.uint16).tobytes() == rb.embeds.tobytes()
