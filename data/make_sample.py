"""Regenerate data/sample_rows.npy: the bundled patch-row input of the demo (until image decoding lands).

A deterministic 128x128 RGB test picture (gradients and rings), normalized as the Qwen3-VL fast image processor
does ((2u - 255) / 255 per uint8 value), both temporal slots filled with the same frame, patchified into
merge-block-major rows with (c, t, y, x) columns: shape [64, 1536] float32, grid (1, 8, 8).
Needs numpy only."""
import numpy as np

H = W = 128
P, T, M = 16, 2, 2
y, x = np.mgrid[0:H, 0:W].astype(np.float64)
r = np.hypot(y - 60, x - 70)
img = np.stack([(x * 2) % 256, (y * 2) % 256, 127.5 + 127.5 * np.cos(r / 6.0)], axis=0)
u = np.clip(np.rint(img), 0, 255).astype(np.uint8)                 # [3, H, W]
norm = ((2.0 * u.astype(np.float64) - 255.0) / 255.0).astype(np.float32)
frames = np.stack([norm, norm], axis=1)                            # [3, T, H, W]
gh, gw = H // P, W // P
rows = []
for bh in range(gh // M):
    for bw in range(gw // M):
        for ih in range(M):
            for iw in range(M):
                py, px = (bh * M + ih) * P, (bw * M + iw) * P
                rows.append(frames[:, :, py:py + P, px:px + P].reshape(-1))
np.save("data/sample_rows.npy", np.stack(rows).astype(np.float32))
