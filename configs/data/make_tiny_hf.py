#!/usr/bin/env python3
"""Writes a tiny Hugging Face model folder, shaped like a real one, for trying
the "fine-tune an HF model" path without downloading anything:

  config.json             Qwen2ForCausalLM (q/k/v biases) or LlamaForCausalLM
  model.safetensors       random fp32 weights (std 0.02, biases 0, norms 1)
  tokenizer.json          byte-level BPE: the 256 byte symbols, no merges, plus
                          <|endoftext|>, <|im_start|>, <|im_end|>
  tokenizer_config.json   a ChatML chat_template (as Qwen2.5's, without tools)
  generation_config.json  eos = <|im_end|>, <|endoftext|>

usage: make_tiny_hf.py OUT_DIR [--family qwen2|llama|qwen3|mistral] [--seed S]
Only the Python standard library is used.
"""
import argparse
import json
import os
import random
import struct


def bytes_to_unicode():
    # GPT-2's reversible byte -> printable character map (byte-level BPE).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message.role != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tensors(cfg, family, rng):
    d, f, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    h, kv, vocab = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    out = [("model.embed_tokens.weight", [vocab, d], "rand")]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out += [(p + "input_layernorm.weight", [d], "one"),
                (p + "self_attn.q_proj.weight", [h * hd, d], "rand"),
                (p + "self_attn.k_proj.weight", [kv * hd, d], "rand"),
                (p + "self_attn.v_proj.weight", [kv * hd, d], "rand"),
                (p + "self_attn.o_proj.weight", [d, h * hd], "rand"),
                (p + "post_attention_layernorm.weight", [d], "one"),
                (p + "mlp.gate_proj.weight", [f, d], "rand"),
                (p + "mlp.up_proj.weight", [f, d], "rand"),
                (p + "mlp.down_proj.weight", [d, f], "rand")]
        if family == "qwen2":
            out += [(p + "self_attn.q_proj.bias", [h * hd], "zero"), (p + "self_attn.k_proj.bias", [kv * hd], "zero"),
                    (p + "self_attn.v_proj.bias", [kv * hd], "zero")]
        if family == "qwen3":
            out += [(p + "self_attn.q_norm.weight", [hd], "one"), (p + "self_attn.k_norm.weight", [hd], "one")]
    out.append(("model.norm.weight", [d], "one"))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [vocab, d], "rand"))
    return out


def write_safetensors(path, specs, rng):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape, init in specs:
        n = 1
        for s in shape:
            n *= s
        vals = [rng.gauss(0.0, 0.02) if init == "rand" else (1.0 if init == "one" else 0.0) for _ in range(n)]
        blob = struct.pack(f"<{n}f", *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--family", default="qwen2", choices=["qwen2", "llama", "qwen3", "mistral"])
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    arch = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "mistral": "MistralForCausalLM"}[a.family]
    cfg = {"architectures": [arch], "model_type": a.family, "vocab_size": 320, "hidden_size": 64,
           "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "max_position_embeddings": 512, "tie_word_embeddings": a.family == "qwen2", "torch_dtype": "float32",
           "bos_token_id": None, "eos_token_id": 258}
    if a.family == "qwen3":
        cfg["head_dim"] = 24  # != 64 / 4, as in the real Qwen3 models
    if a.family == "mistral":
        cfg["sliding_window"] = 256
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors(cfg, a.family, rng), rng)
    tok = {"version": "1.0",
           "added_tokens": [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, s in enumerate(specials)],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": []}}
    with open(os.path.join(a.out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    tc = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": 512,
          "tokenizer_class": "Qwen2Tokenizer", "chat_template": CHAT_TEMPLATE,
          "added_tokens_decoder": {str(256 + i): {"content": s, "special": True} for i, s in enumerate(specials)}}
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [258, 256], "bos_token_id": None}, f, indent=2)
    print(f"wrote a tiny {a.family} HF folder to {a.out}")


if __name__ == "__main__":
    main()
