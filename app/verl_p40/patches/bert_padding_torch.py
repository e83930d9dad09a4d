# Installed into verl by verl-p40's patch set as verl/utils/bert_padding_torch.py.
"""Pure-PyTorch versions of the four `flash_attn.bert_padding` helpers verl 0.5.0 imports.

verl imports them at module level whenever CUDA is present, but flash-attn cannot be built for compute
capability < 8.0 (a Tesla P40 is 6.1). They are only called on the remove-padding path
(`use_remove_padding=True`); these versions keep that path working without flash-attn, with the same
signatures and results as flash-attn 2.7's.
"""

import torch
import torch.nn.functional as F

try:
    from einops import rearrange
except ImportError:  # only the remove-padding path calls rearrange

    def rearrange(tensor, pattern, **axes_lengths):
        raise ImportError("use_remove_padding needs the 'einops' package (pip install einops)")


__all__ = ["index_first_axis", "pad_input", "rearrange", "unpad_input"]


def index_first_axis(tensor, indices):
    """tensor[indices] along the first axis (differentiable through indexing)."""
    return tensor[indices]


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """Drop padded positions: (batch, seqlen, ...) -> (total_tokens, ...), with what pad_input needs to undo it.

    Returns (hidden_states, indices, cu_seqlens, max_seqlen_in_batch, seqused), like flash-attn 2.7.
    """
    all_masks = (attention_mask + unused_mask) if unused_mask is not None else attention_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = int(seqlens_in_batch.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen_in_batch, used_seqlens_in_batch


def pad_input(hidden_states, indices, batch, seqlen):
    """Inverse of unpad_input: (total_tokens, ...) -> (batch, seqlen, ...), zeros at padded positions."""
    output = hidden_states.new_zeros((batch * seqlen, *hidden_states.shape[1:]))
    output = output.index_put((indices,), hidden_states)
    return output.view(batch, seqlen, *hidden_states.shape[1:])
