"""The KV pool: one tensor holding every layer's K and V pages."""
import torch


class KVCache:
    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, num_pages: int, page_size: int,
                 dtype, device):
        self.page_size = page_size
        # [L, 2, 1, H, N*P, D]: per layer a [1, H, N*P, D] view, the batch-1 key/value that every decode
        # row's physical BlockMask indexes into; one tensor so a page copy is one op for all layers.
        self.data = torch.zeros(num_layers, 2, 1, num_kv_heads, num_pages * page_size, head_dim,
                                dtype=dtype, device=device)
        self.layers = [(self.data[i, 0], self.data[i, 1]) for i in range(num_layers)]

    @staticmethod
    def bytes_per_page(num_layers: int, num_kv_heads: int, head_dim: int, page_size: int, dtype) -> int:
        return num_layers * 2 * num_kv_heads * page_size * head_dim * torch.empty((), dtype=dtype).element_size()

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def copy_pages(self, src: list[int], dst: list[int]) -> None:
        """Copy whole pages (all layers, K and V): the copy-on-write of a shared partial page."""
        if not src:
            return
        L, two, one, H, NP, D = self.data.shape
        pages = self.data.view(L, two * one * H, NP // self.page_size, self.page_size * D)
        dev = self.data.device
        # layer by layer: a gather over all layers at once would materialise every copied page
        # (3.6 GB for a 64-prompt x 4 GRPO batch on Qwen3-4B) before writing it
        s, d = torch.tensor(src, device=dev), torch.tensor(dst, device=dev)
        for layer in pages:  # [2*H, N, P*D]
            layer.index_copy_(1, d, layer.index_select(1, s))
