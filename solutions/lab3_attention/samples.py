"""Sample submissions for Lab 3: correct variants and one per catalogued bug.

Each sample names the solution cells it replaces (by grade_id) and what the grader must conclude
(``expect``). Format: :mod:`autograder.sample_submissions`.
"""
from autograder.sample_submissions import bug_cell

LAB = "lab3_attention"

MASK_HEAD = "def causal_mask(t_q, t_k, device=None):\n"
ATTN_HEAD = "def causal_attention(q, k, v, dropout_p=0.0, training=True):\n"
SPLIT_HEAD = "def split_heads(x, n_heads):\n"
TOKEN_HEAD = "def tokenize_smiles(smiles):\n"
WEIGHTS_HEAD = "def causal_attention_weights(q, k):\n"


SAMPLES: dict[str, dict] = {
    # -- correct alternatives: full marks ---------------------------------------------------------------
    "lab3_variant_einsum_where": {"expect": {"full": True}, "cells": {
        "causal_mask": MASK_HEAD +
        "    i = torch.arange(t_q, device=device)[:, None]\n"
        "    j = torch.arange(t_k, device=device)[None, :]\n"
        "    return j <= i + (t_k - t_q)\n",
        "causal_attention": ATTN_HEAD +
        "    scores = torch.einsum('bhqd,bhkd->bhqk', q, k) * q.shape[-1] ** -0.5\n"
        "    allowed = causal_mask(q.shape[-2], k.shape[-2], device=q.device)\n"
        "    scores = torch.where(allowed, scores, torch.tensor(float('-inf'), dtype=scores.dtype))\n"
        "    weights = F.dropout(torch.softmax(scores, dim=-1), dropout_p, training)\n"
        "    return torch.einsum('bhqk,bhkd->bhqd', weights, v)\n",
        "split_heads": SPLIT_HEAD +
        "    b, t, c = x.shape\n    return x.reshape(b, t, n_heads, -1).permute(0, 2, 1, 3)\n",
        "merge_heads": "def merge_heads(x):\n    b, h, t, d = x.shape\n"
        "    return x.permute(0, 2, 1, 3).contiguous().view(b, t, h * d)\n",
    }},
    "lab3_variant_finfo_matmul": {"expect": {"full": True}, "cells": {
        "causal_attention": ATTN_HEAD +
        "    t_q, t_k = q.shape[-2], k.shape[-2]\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    future = torch.triu(torch.ones(t_q, t_k, dtype=torch.bool, device=q.device), diagonal=t_k - t_q + 1)\n"
        "    scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)\n"
        "    weights = F.dropout(scores.softmax(dim=-1), p=dropout_p, training=training)\n"
        "    return weights @ v\n",
        "tokenize_smiles": TOKEN_HEAD +
        "    two = ('Cl', 'Br')\n    single = set('BCNOPSFIbcnops-=#$:/\\\\().*0123456789')\n"
        "    out, i = [], 0\n"
        "    while i < len(smiles):\n"
        "        if smiles[i] == '[':\n"
        "            j = smiles.find(']', i)\n"
        "            if j < 0 or '[' in smiles[i + 1:j] or j == i + 1:\n"
        "                raise ValueError(f'unclosed bracket atom at position {i}')\n"
        "            out.append(smiles[i:j + 1]); i = j + 1\n"
        "        elif smiles[i:i + 2] in two:\n"
        "            out.append(smiles[i:i + 2]); i += 2\n"
        "        elif smiles[i] == '%' and smiles[i + 1:i + 3].isdigit() and len(smiles[i + 1:i + 3]) == 2:\n"
        "            out.append(smiles[i:i + 3]); i += 3\n"
        "        elif smiles[i] in single:\n"
        "            out.append(smiles[i]); i += 1\n"
        "        else:\n"
        "            raise ValueError(f'unexpected character {smiles[i]!r} at position {i}')\n"
        "    return out\n",
    }},
    # weights softmaxed in float32 for half inputs, masked with finfo.min (exactly 0 after exp in float32)
    "lab3_variant_weights_finfo_float32": {"expect": {"full": True}, "cells": {
        "causal_attention_weights": WEIGHTS_HEAD +
        "    scores = torch.einsum('bhqd,bhkd->bhqk', q, k) * q.shape[-1] ** -0.5\n"
        "    t_q, t_k = scores.shape[-2:]\n"
        "    i = torch.arange(t_q, device=q.device)[:, None]\n"
        "    j = torch.arange(t_k, device=q.device)[None, :]\n"
        "    scores = scores.masked_fill(j > i + (t_k - t_q), torch.finfo(scores.dtype).min)\n"
        "    wide = torch.promote_types(scores.dtype, torch.float32)\n"
        "    return scores.softmax(dim=-1, dtype=wide).to(q.dtype)\n",
    }},
    "lab3_variant_own_mask_sdpa": {"expect": {"full": True}, "cells": {
        "causal_attention": ATTN_HEAD +
        "    mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)\n"
        "    p = dropout_p if training else 0.0\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)\n",
        "CausalSelfAttention":
        "class CausalSelfAttention(nn.Module):\n"
        "    def __init__(self, d_model, n_heads, dropout=0.0):\n"
        "        super().__init__()\n"
        "        if d_model % n_heads != 0:\n"
        "            raise ValueError('d_model must be divisible by n_heads')\n"
        "        self.n_heads, self.dropout = n_heads, dropout\n"
        "        self.qkv = nn.Linear(d_model, 3 * d_model)\n"
        "        self.proj = nn.Linear(d_model, d_model)\n\n"
        "    def forward(self, x):\n"
        "        q, k, v = self.qkv(x).chunk(3, dim=-1)\n"
        "        q, k, v = (split_heads(z, self.n_heads) for z in (q, k, v))\n"
        "        y = causal_attention(q, k, v, dropout_p=self.dropout, training=self.training)\n"
        "        return self.proj(merge_heads(y))\n",
    }},
    # generate as a plain loop: no torch.no_grad(), probabilities in float64, the cache kept in its own branch
    "lab3_variant_generate_plain_loop": {"expect": {"full": True}, "cells": {
        "generate":
        "def generate(model, prompt_ids, max_new_tokens, use_kv_cache, temperature=1.0, generator=None):\n"
        "    out = prompt_ids.clone()\n"
        "    cache = None\n"
        "    for step in range(max_new_tokens):\n"
        "        if not use_kv_cache:\n"
        "            last = model(out)[:, -1, :]\n"
        "        elif cache is None:\n"
        "            logits, cache = model.decode(out, None)\n"
        "            last = logits[:, -1, :]\n"
        "        else:\n"
        "            logits, cache = model.decode(out[:, -1:], cache)\n"
        "            last = logits[:, -1, :]\n"
        "        if temperature == 0:\n"
        "            nxt = torch.argmax(last, dim=-1).unsqueeze(1)\n"
        "        else:\n"
        "            probs = torch.softmax(last.double() / temperature, dim=-1)\n"
        "            nxt = torch.multinomial(probs, num_samples=1, generator=generator)\n"
        "        out = torch.cat((out, nxt), dim=1)\n"
        "    return out\n",
    }},
}

BUG_SAMPLES = {
    "missing_scale": "causal_attention_weights", "softmax_over_queries": "causal_attention_weights",
    "triu_diagonal_zero": "causal_mask", "transposed_mask": "causal_mask",
    "is_causal_top_left": "causal_attention", "masked_fill_minus_1e9": "causal_attention",
    "dropout_ignores_training": "causal_attention",
    "view_heads_first": "split_heads",
    "character_level": "tokenize_smiles", "findall_drops_unmatched": "tokenize_smiles",
    "cache_fed_whole_sequence": "generate",
}
for _bug_id, _function in BUG_SAMPLES.items():
    SAMPLES[f"lab3_bug_{_bug_id}"] = {"cells": {_function: bug_cell(LAB, _bug_id)},
                                      "expect": {"full": False, "bug": _bug_id, "function": _function}}

# The reference student hands in every lab (its folder is shared with Labs 1 and 2).
SAMPLES["reference"] = {"cells": {}, "expect": {"full": True}}

# The reference causal_attention is built on causal_attention_weights: a bug there costs both functions' tests.
DEPENDS = {"causal_attention": ["causal_attention_weights"]}
