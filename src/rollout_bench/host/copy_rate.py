"""The device's own memory-copy rate, measured: the ceiling a memory-bound decode step is judged against.

A device-to-device copy of a buffer many times the L2 (bytes read plus bytes written, over the median of
timed copies after a warm-up), as METHOD.md asks, instead of a datasheet figure: an H200 copies at about
4.3 TB/s, not the 4.8 its datasheet gives."""
import statistics


def measure(device, gib: float = 1.0, repeats: int = 10) -> float | None:
    """GB/s (1e9 bytes) of read + write for a `gib` GiB copy on `device`; None off CUDA."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None
    n = int(gib * 2**30)
    try:
        src = torch.empty(n, dtype=torch.uint8, device=device).random_()  # not zeros: METHOD.md
        dst = torch.empty_like(src)
    except torch.cuda.OutOfMemoryError:  # an engine that holds nearly all the memory: no ceiling, not a failure
        return None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dst.copy_(src)  # warm-up
    times = []
    for _ in range(repeats):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return round(2 * n / statistics.median(times) / 1e9, 1)
