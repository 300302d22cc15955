"""The KV pool: K and V pages of every layer that stores its own; a KV-sharing layer reads its store
layer's pages (no second copy)."""
import torch


class KVCache:
    def __init__(self, shapes: list[tuple[int, int]], source: list[int], num_pages: int, page_size: int,
                 dtype, device):
        """shapes[i] = (kv heads, head dim) of layer i; source[i] = the layer whose K/V layer i reads
        (i itself for a layer that stores; a store layer comes first and stores for itself)."""
        assert len(shapes) == len(source) and all(source[source[i]] == source[i] <= i for i in range(len(source)))
        self.page_size = page_size
        stores = [i for i in range(len(shapes)) if source[i] == i]
        # One tensor per (heads, head dim) of the store layers, [L_g, 2, 1, H, N*P, D]: per layer a
        # [1, H, N*P, D] view, the batch-1 key/value that every decode row's physical BlockMask indexes
        # into; a page copy is then one op per group. Llama/Qwen3 have one group of all layers.
        self.groups: list[torch.Tensor] = []
        pairs: dict[int, torch.Tensor] = {}
        for shape in dict.fromkeys(shapes[i] for i in stores):
            members = [i for i in stores if shapes[i] == shape]
            H, D = shape
            data = torch.zeros(len(members), 2, 1, H, num_pages * page_size, D, dtype=dtype, device=device)
            self.groups.append(data)
            pairs.update({i: data[j] for j, i in enumerate(members)})
        # per layer, its store's K and V as one [2, 1, H, N*P, D] tensor (the runner writes and attends through
        # it), and as two [1, H, N*P, D] views (the traffic count and diagnostics read those)
        self.pairs = [pairs[source[i]] for i in range(len(shapes))]
        self.layers = [(kv[0], kv[1]) for kv in self.pairs]
        self.stores = stores

    @staticmethod
    def bytes_per_page(shapes: list[tuple[int, int]], source: list[int], page_size: int, dtype) -> int:
        size = torch.empty((), dtype=dtype).element_size()
        return sum(2 * H * page_size * D * size for i, (H, D) in enumerate(shapes) if source[i] == i)

    @property
    def nbytes(self) -> int:
        return sum(g.numel() * g.element_size() for g in self.groups)

    def copy_pages(self, src: list[int], dst: list[int]) -> None:
        """Copy whole pages (all layers, K and V): the copy-on-write of a shared partial page."""
        if not src:
            return
        dev = self.groups[0].device
        s, d = torch.tensor(src, device=dev), torch.tensor(dst, device=dev)
        for data in self.groups:
            L, two, one, H, NP, D = data.shape
            pages = data.view(L, two * one * H, NP // self.page_size, self.page_size * D)
            # layer by layer: a gather over all layers at once would materialise every copied page
            # (3.6 GB for a 64-prompt x 4 GRPO batch on Qwen3-4B) before writing it
            for layer in pages:  # [2*H, N, P*D]
                layer.index_copy_(1, d, layer.index_select(1, s))
