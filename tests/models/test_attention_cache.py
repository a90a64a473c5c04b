"""The attention layer's cache at a MAC segment start: a call of several tokens that opens a
segment can see nothing cached, so it leaves the cache out of its keys (and out of the graph);
a single token keeps the cache's fixed shape (one compiled decode graph at every position)."""

import torch

from titans_atlas.layers.attention import Attention, VisibilityRule

SEGMENT = 8


def _layer() -> Attention:
    torch.manual_seed(0)
    return Attention(32, 4, VisibilityRule(segment=SEGMENT), num_persistent=2)


def test_segment_start_matches_one_call_and_sends_no_gradient_into_the_cache():
    attn = _layer()
    x = torch.randn(2, 2 * SEGMENT, 32, requires_grad=True)
    whole, _ = attn(x, None, 0)
    first, part = x.split(SEGMENT, dim=1)
    _, cache = attn(first, None, 0)
    second, _ = attn(part, cache, SEGMENT)
    torch.testing.assert_close(second, whole[:, SEGMENT:])
    (into_first,) = torch.autograd.grad(second.sum(), first, allow_unused=True)
    assert into_first is None  # not a zero gradient: no edge through the cache at all


def test_mid_segment_calls_still_read_the_cache():
    attn = _layer()
    x = torch.randn(1, SEGMENT, 32)
    whole, _ = attn(x, None, 0)
    _, cache = attn(x[:, :3], None, 0)
    rest, _ = attn(x[:, 3:], cache, 3)
    torch.testing.assert_close(rest, whole[:, 3:])


def test_one_token_at_a_segment_start_keeps_the_cache_shape():
    attn = _layer()
    x = torch.randn(1, SEGMENT + 1, 32)
    whole, _ = attn(x, None, 0)
    _, cache = attn(x[:, :SEGMENT], None, 0)
    out, after = attn(x[:, SEGMENT:], cache, SEGMENT)
    torch.testing.assert_close(out, whole[:, SEGMENT:])
    assert after.keys.shape == cache.keys.shape


def test_segment_start_gradients_equal_one_call_in_float64():
    attn = _layer().double()
    x = torch.randn(2, 2 * SEGMENT + 3, 32, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(2, 2 * SEGMENT + 3, 32, dtype=torch.float64)
    whole, _ = attn(x, None, 0)
    grads_whole = torch.autograd.grad((whole * weights).sum(), [x, *attn.parameters()])
    cache, outs, pos = None, [], 0
    for part in x.split([SEGMENT, SEGMENT, 3], dim=1):  # two segment starts, then a partial one
        out, cache = attn(part, cache, pos)
        outs.append(out)
        pos += part.shape[1]
    pieces = torch.cat(outs, dim=1)
    torch.testing.assert_close(pieces, whole)
    grads_pieces = torch.autograd.grad((pieces * weights).sum(), [x, *attn.parameters()])
    for got, want in zip(grads_pieces, grads_whole):
        torch.testing.assert_close(got, want)
