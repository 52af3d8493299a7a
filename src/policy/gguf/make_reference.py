"""
Reference files and outputs for the GGUF import tests, made with llama.cpp's own Python package
(`gguf`: its writer, quantisers and dequantisers) and with `transformers`' GGUF loader.

  make_reference.py quants OUT
      OUT/quants.gguf: one tensor per supported GGML type (F32, F16, BF16, Q4_0, Q4_1, Q5_0,
      Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), written by gguf.GGUFWriter. Types gguf can
      quantise hold its quantiser's output for random data, and a second tensor of random but
      valid blocks; the K-quants (no quantiser in gguf) hold random valid blocks only.
      OUT/quants-reference.safetensors: each tensor read back with gguf.GGUFReader and decoded
      with gguf.quants.dequantize, as float32.

  make_reference.py tiny OUT
      Tiny random Llama (untied, GQA 2:1, pre-tokenizer "llama-bpe") and Qwen2 (tied, q/k/v biases,
      pre-tokenizer "qwen2") models written as GGUF the way llama.cpp's converter writes them:
      tensor names from gguf's own name map, Llama q/k rows permuted for its rotary layout, weights
      in a mix of F32, F16, BF16, Q4_0-Q8_0 and K-quant types, a byte-level BPE vocabulary trained
      with `tokenizers`, a ChatML template. For each, transformers loads the GGUF itself
      (from_pretrained(gguf_file=...)) and OUT/tiny.json holds its logits on a few sequences, its
      token ids for a set of strings and its chat-template renderings; OUT/<name>.state.safetensors
      its dequantised, unpermuted weights. Also files the import must refuse: another architecture,
      an unsupported tensor type, a SentencePiece vocabulary, a tensor it does not know.

  make_reference.py smollm2 MODEL_DIR GGUF OUT
      References for the real SmolLM2-135M-Instruct GGUF, from transformers loading GGUF itself:
      token ids for 200+ varied strings (plus what Python `tokenizers` and transformers make of
      the converted MODEL_DIR), chat-template renderings, next-token logits, a greedy answer, and a
      sha256 of every dequantised weight; all in OUT/smollm2.json and OUT/smollm2-logits.safetensors.

Blocks are "valid" when their f16 scale fields are finite: the bytes are otherwise random, and
a NaN scale would only compare NaN payloads, which no checkpoint holds.
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import save_file

RNG = np.random.default_rng(0)

QUANTISABLE = [Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]
# The byte offsets of each block's f16 scale fields (d, dmin...), which must stay finite.
SCALE_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
}


def random_blocks(qtype, rows, cols, magnitude=None):
    """Random blocks; scales across the f16 range (subnormals and negatives included), or, with
    `magnitude`, positive scales near it (weights of a usable size for a model)."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block_size
    blocks = RNG.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for offset in SCALE_FIELDS[qtype]:
        if magnitude is None:
            scales = (RNG.standard_normal(n_blocks) * 10.0 ** RNG.integers(-6, 3, n_blocks)).astype(np.float16)
        else:
            scales = (magnitude * (0.5 + RNG.random(n_blocks))).astype(np.float16)
        blocks[:, offset:offset + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(rows, cols // block_size * type_size)


def quants(out):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, 'quants.gguf')
    writer = gguf.GGUFWriter(path, arch='llama')
    rows, cols = 3, 512
    data = (RNG.standard_normal((rows, cols)) * 0.5).astype(np.float32)
    # Values float16 and bfloat16 store specially: signed zeros, infinities, subnormals, the largest finite.
    data[0, :8] = [0.0, -0.0, np.inf, -np.inf, 6.0e-8, -3.0e-5, 65504.0, 1.0e-40]
    writer.add_tensor('f32', data)
    writer.add_tensor('f16', gguf.quants.quantize(data, Q.F16))
    writer.add_tensor('bf16.specials', gguf.quants.quantize(data, Q.BF16), raw_dtype=Q.BF16)
    # The block quantisers need finite inputs.
    finite = np.where(np.isfinite(data), data, np.float32(3.0))
    for qtype in QUANTISABLE:
        writer.add_tensor(f'{qtype.name.lower()}.quantised', gguf.quants.quantize(finite, qtype), raw_dtype=qtype)
    for qtype in [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]:
        writer.add_tensor(f'{qtype.name.lower()}.random', random_blocks(qtype, rows, cols), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    reference = {}
    types = {}
    for tensor in gguf.GGUFReader(path).tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        reference[tensor.name] = np.ascontiguousarray(values.reshape(rows, cols), dtype=np.float32)
        types[tensor.name] = tensor.tensor_type.name
    save_file(reference, os.path.join(out, 'quants-reference.safetensors'), metadata={'types': json.dumps(types)})



SPECIAL = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']
CORPUS = [
    'You are in the hall. You see a red box, a blue drawer and a door to the kitchen.',
    'go to kitchen', 'open red box', 'take yellow hat', 'put yellow hat in red box', 'look around',
    'The red box is open. Inside it: a yellow hat. It\'s 12 steps away; they\'ll wait.',
    'You are a helpful assistant.', 'What is 2 + 2? 4096 and 1234567.', 'système, naïve café ÜBER straße',
    '日本語のテキスト 中文 한국어', 'emoji 🙂🚀 and tabs\tand\nnewlines\r\n  spaces',
]
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TEST_STRINGS = [
    'go to kitchen', ' open the red box', 'It\'s 12 o\'clock; they\'ll be 1234567 late.', 'naïve café',
    'Straße ÜBER', '日本語 テキスト', '🙂🚀!', 'tabs\tand\nnewlines\r\n', '   three spaces', 'x  \n\n  y',
    '<|im_start|>user\nhello<|im_end|>\n', 'HELLO World', "DON'T", '3.14159', '',
]
CONVERSATIONS = [
    [{'role': 'user', 'content': 'open red box'}],
    [{'role': 'system', 'content': 'You play a text game.'}, {'role': 'user', 'content': 'look around'},
     {'role': 'assistant', 'content': 'go to kitchen'}, {'role': 'user', 'content': 'You are in the kitchen.'}],
]

# The two architectures: llama permutes q/k; qwen2 has q/k/v biases and ties its embeddings.
TINY = {
    'tiny-llama': dict(arch='llama', pre='llama-bpe', tie=False, types={
        'token_embd': Q.Q8_0, 'output': Q.Q6_K, 'attn_q': Q.Q4_K, 'attn_k': Q.Q5_K, 'attn_v': Q.Q4_0,
        'attn_output': Q.Q5_0, 'ffn_gate': Q.Q2_K, 'ffn_up': Q.Q3_K, 'ffn_down': Q.Q4_1}),
    'tiny-qwen2': dict(arch='qwen2', pre='qwen2', tie=True, types={
        'token_embd': Q.F16, 'attn_q': Q.Q5_1, 'attn_k': Q.Q8_0, 'attn_v': Q.BF16, 'attn_output': Q.Q6_K,
        'ffn_gate': Q.Q4_K, 'ffn_up': Q.Q5_K, 'ffn_down': Q.Q4_0}),
}
# Rotary scaling as llama.cpp's converter writes it: Llama 3's as per-dimension factors in a
# rope_freqs tensor, linear as metadata. Weights stay float32, so the reference is the original
# transformers model itself (transformers' GGUF loader reads neither).
SCALED = {
    'tiny-llama3-rope': {'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
                         'original_max_position_embeddings': 8192},
    'tiny-llama-linear-rope': {'rope_type': 'linear', 'factor': 4.0},
}
# Random K-quant blocks: scales giving weights of about 0.05.
MAGNITUDE = {Q.Q2_K: 1e-3, Q.Q3_K: 5e-4, Q.Q4_K: 5e-5, Q.Q5_K: 2.5e-5, Q.Q6_K: 1e-5}


def llama_cpp_permute(weights, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: rows regrouped for llama.cpp's rotary kernel."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def llama3_rope_factors(rope, theta, dim):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors for rope_type llama3."""
    import math
    import torch
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = rope['factor'], rope['low_freq_factor'], rope['high_freq_factor']
    old_context_len = 8192  # the converter reads it from the top level of config.json, where Llama 3.1 has none
    low_wavelen, high_wavelen = old_context_len / low, old_context_len / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 10, trainer)
    saved = json.loads(tok.to_str())
    vocab = saved['model']['vocab']
    tokens = [None] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    merges = [m if isinstance(m, str) else ' '.join(m) for m in saved['model']['merges']]
    return tokens, merges


def write_tiny(path, spec, model, tokens, merges, n_heads, n_kv_heads):
    arch = spec['arch']
    cfg = model.config
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(os.path.basename(path))
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv_heads)
    writer.add_rope_freq_base(cfg.rope_theta if hasattr(cfg, 'rope_theta') else cfg.rope_parameters['rope_theta'])
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_dimension_count(cfg.hidden_size // n_heads)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model('gpt2')
    writer.add_tokenizer_pre(spec['pre'])
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIAL else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index('<|endoftext|>'))
    writer.add_eos_token_id(tokens.index('<|im_end|>'))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    rope = spec.get('rope')
    if rope and rope['rope_type'] == 'linear':
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(rope['factor'])
    if rope and rope['rope_type'] == 'llama3':
        writer.add_tensor('rope_freqs.weight', llama3_rope_factors(rope, 10000.0, cfg.hidden_size // n_heads))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH_NAMES_INV[arch] if hasattr(gguf, 'MODEL_ARCH_NAMES_INV') else
                                     {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch], cfg.num_hidden_layers)
    for hf_name, tensor in model.state_dict().items():
        if spec['tie'] and hf_name == 'lm_head.weight':
            continue
        base, suffix = hf_name.rsplit('.', 1)
        name = names.get_name(base)
        assert name is not None, hf_name
        data = tensor.float().numpy()
        if arch == 'llama' and base.endswith('q_proj'):
            data = llama_cpp_permute(data, n_heads)
        if arch == 'llama' and base.endswith('k_proj'):
            data = llama_cpp_permute(data, n_kv_heads)
        qtype = spec['types'].get(name.split('.')[-1]) if suffix == 'weight' and data.ndim == 2 else None
        full = f'{name}.{suffix}'
        if qtype is None:
            writer.add_tensor(full, np.ascontiguousarray(data, dtype=np.float32))
        elif qtype in MAGNITUDE:
            writer.add_tensor(full, random_blocks(qtype, data.shape[0], data.shape[1], MAGNITUDE[qtype]), raw_dtype=qtype)
        elif qtype == Q.F16:
            writer.add_tensor(full, data.astype(np.float16))
        else:
            writer.add_tensor(full, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_refused(out, tokens, merges):
    """Small files the import must refuse, each for one reason."""
    def start(name, arch='llama', model='gpt2'):
        w = gguf.GGUFWriter(os.path.join(out, name), arch)
        w.add_context_length(64)
        w.add_embedding_length(32)
        w.add_block_count(1)
        w.add_feed_forward_length(64)
        w.add_head_count(2)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_tokenizer_model(model)
        w.add_tokenizer_pre('llama-bpe')
        w.add_token_list(tokens)
        w.add_token_merges(merges)
        return w

    def finish(w, extra=None):
        v = len(tokens)
        shapes = {'token_embd.weight': (v, 32), 'output_norm.weight': (32,), 'blk.0.attn_norm.weight': (32,),
                  'blk.0.ffn_norm.weight': (32,), 'blk.0.attn_q.weight': (32, 32), 'blk.0.attn_k.weight': (32, 32),
                  'blk.0.attn_v.weight': (32, 32), 'blk.0.attn_output.weight': (32, 32),
                  'blk.0.ffn_gate.weight': (64, 32), 'blk.0.ffn_up.weight': (64, 32), 'blk.0.ffn_down.weight': (32, 64)}
        for name, shape in shapes.items():
            if extra and name in extra:
                continue
            w.add_tensor(name, (RNG.standard_normal(shape) * 0.1).astype(np.float32))
        for name, (data, qtype) in (extra or {}).items():
            w.add_tensor(name, data, raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    finish(start('ok.gguf'))
    finish(start('arch-gpt2.gguf', arch='gpt2'))
    finish(start('tokenizer-llama.gguf', model='llama'))
    finish(start('type-iq4nl.gguf'), {'blk.0.attn_q.weight': (RNG.integers(0, 256, size=(32, 18), dtype=np.uint8), Q.IQ4_NL)})
    finish(start('extra-tensor.gguf'), {'blk.0.attn_sinks.weight': (np.ones(2, dtype=np.float32), Q.F32)})


def tiny(out):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    from safetensors.torch import save_file as save_torch
    torch.manual_seed(0)
    torch.set_num_threads(2)
    os.makedirs(out, exist_ok=True)
    tokens, merges = train_tokenizer()
    result = {'strings': TEST_STRINGS, 'conversations': CONVERSATIONS, 'models': {}}
    sequences = [[5, 17, 200, 3, 99, 401, 2], [1, 250, 251, 252, 10, 11, 12, 13, 300, 2]]
    result['sequences'] = sequences
    for name, spec in TINY.items():
        common = dict(vocab_size=len(tokens), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                      tie_word_embeddings=spec['tie'])
        model = (LlamaForCausalLM(LlamaConfig(**common)) if spec['arch'] == 'llama' else Qwen2ForCausalLM(Qwen2Config(**common))).float()
        with torch.no_grad():
            for p in model.parameters():
                # Wide enough that a wrong detail shows, narrow enough that float32 rounding stays far
                # below the tolerance (about 1e-5 relative between float32 and float64 in PyTorch).
                p.copy_(torch.randn_like(p) * (0.1 if p.ndim > 1 else 0.05) + (1.0 if p.ndim == 1 and p.shape[0] == 256 else 0.0))
        path = os.path.join(out, f'{name}.gguf')
        write_tiny(path, spec, model, tokens, merges, 4, 2)

        # What transformers makes of the file, on its own.
        loaded = AutoModelForCausalLM.from_pretrained(out, gguf_file=f'{name}.gguf', dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(out, gguf_file=f'{name}.gguf')
        state = {k: v.contiguous() for k, v in loaded.state_dict().items() if not (spec['tie'] and k == 'lm_head.weight')}
        save_torch(state, os.path.join(out, f'{name}.state.safetensors'))
        with torch.no_grad():
            logits = [loaded(torch.tensor([s])).logits[0].tolist() for s in sequences]
        result['models'][name] = {
            'file': path,
            'logits': logits,
            'ids': [tok.encode(s, add_special_tokens=True) for s in TEST_STRINGS],
            'chat': [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in CONVERSATIONS],
        }
    long_sequence = [int(t) for t in np.random.default_rng(3).integers(3, len(tokens), 300)]
    result['long_sequence'] = long_sequence
    for name, rope in SCALED.items():
        config = LlamaConfig(vocab_size=len(tokens), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384,
                             rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=dict(rope), tie_word_embeddings=False)
        model = LlamaForCausalLM(config).float().eval()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * (0.1 if p.ndim > 1 else 0.05) + (1.0 if p.ndim == 1 and p.shape[0] == 256 else 0.0))
        path = os.path.join(out, f'{name}.gguf')
        write_tiny(path, dict(arch='llama', pre='llama-bpe', tie=False, types={}, rope=rope), model, tokens, merges, 4, 2)
        with torch.no_grad():
            logits = model(torch.tensor([long_sequence])).logits[0]
        result['models'][name] = {'file': path, 'rope': rope, 'logits': logits.tolist()}
    write_refused(out, tokens, merges)
    with open(os.path.join(out, 'tiny.json'), 'w') as f:
        json.dump(result, f)


def varied_strings():
    """200+ strings: words, unicode scripts, whitespace runs, digits, code, ChatML markers."""
    rng = np.random.default_rng(7)
    words = ['go', 'to', 'the', 'kitchen', 'open', 'red', 'box', 'Paris', 'capital', 'France', "don't", "it's",
             'naïve', 'café', 'Straße', 'ÜBER', 'niño', 'Ελληνικά', 'русский', 'العربية', 'עברית', 'हिन्दी',
             '日本語', '中文', '한국어', 'ไทย', '🙂', '🚀', '👩‍💻', 'x²', '½', '٣٤', '१२३', '①', 'Ⅻ']
    seps = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n ', '\u00a0', '\u3000', '', '-', '_', '.', ', ', '; ']
    strings = [
        'What is the capital of France?', 'The capital of France is Paris.', '', ' ', '  ', '\n', '\t\t', ' \n\n \t ',
        '0', '7', '42', '2024', '3.14159', '1,234,567', '-12.5e-3', 'x = 10 ** 9 + 7', '0x1F 0b1010 1e10',
        'Room 101, floor 3', 'call 555-0199', '12:30pm', '100%', '$5.99', '#1', 'v2.0.1',
        '<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n',
        '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n',
        '<|im_end|><|im_start|>', 'text<|endoftext|>more', '<|im_start|> spaced <|im_end|>', '< |im_start| >',
        '<repo_name>foo<file_sep>bar', '<|im_start|><|im_start|>', 'hello<|im_end|>\n',
        'def f(x):\n    return x * 2\n', 'for (let i = 0; i < n; i++) {}', '{"key": [1, 2, 3]}', '<div class="a">b</div>',
        'SELECT * FROM t WHERE id=3;', 'https://example.com/a?b=c&d=e', 'user@example.com', 'C:\\Program Files\\x',
        "I'm", "you're", "they've", "we'll", "she'd", "IT'S", "Don'T", "o'clock", "rock'n'roll",
        'ALL CAPS TEXT', 'MiXeD cAsE', 'snake_case_name', 'camelCaseName', 'kebab-case-name',
        '...', '!!!', '???', '—', '–', '“quoted”', '‘single’', '«guillemets»', '(parens)', '[brackets]', '{braces}',
        'tab\tseparated\tvalues', 'trailing spaces   ', '   leading spaces', 'multiple   inner   spaces',
        'line1\nline2\r\nline3\rline4', '\u200b zero width', 'a\u0301 combining', 'ﬁ ligature', 'Ａ full width', 'ß ẞ',
    ]
    for i in range(230):
        n = int(rng.integers(1, 8))
        parts = []
        for _ in range(n):
            choice = rng.random()
            if choice < 0.55:
                parts.append(words[int(rng.integers(len(words)))])
            elif choice < 0.8:
                parts.append(str(int(rng.integers(0, 10 ** int(rng.integers(1, 9))))))
            else:
                parts.append(chr(int(rng.choice([rng.integers(0x21, 0x7f), rng.integers(0xa0, 0x2000), rng.integers(0x3000, 0x9fff), rng.integers(0x1f300, 0x1f6ff)]))))
            parts.append(seps[int(rng.integers(len(seps)))])
        strings.append(''.join(parts))
    return strings


def smollm2(model_dir, gguf_path, out):
    import hashlib
    import torch
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from safetensors.torch import save_file as save_torch
    torch.set_num_threads(2)
    os.makedirs(out, exist_ok=True)
    # transformers is given the GGUF alone in a folder: beside our converted files it would read those.
    folder, name = os.path.join(out, 'gguf-only'), os.path.basename(gguf_path)
    os.makedirs(folder, exist_ok=True)
    if not os.path.exists(os.path.join(folder, name)):
        os.symlink(os.path.abspath(gguf_path), os.path.join(folder, name))
    reference_tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    with_llama_cpp_split = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    with_llama_cpp_split.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r'\p{N}'), behavior='isolated'),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    ours_in_tokenizers = Tokenizer.from_file(os.path.join(model_dir, 'tokenizer.json'))
    ours_in_transformers = AutoTokenizer.from_pretrained(model_dir)
    strings = varied_strings()
    conversations = CONVERSATIONS + [[{'role': 'user', 'content': 'What is the capital of France?'}]]
    result = {
        'strings': strings,
        'ids': [reference_tok.encode(s, add_special_tokens=True) for s in strings],
        # transformers' GGUF loader does not know the pre-tokenizer "smollm" and splits as GPT-2 does;
        # llama.cpp (and the model's own tokenizer.json) first isolates every number character:
        # the same tokenizer with llama.cpp's split for "smollm" in front.
        'ids_llama_cpp_split': [with_llama_cpp_split.encode(s, add_special_tokens=True) for s in strings],
        'ids_tokenizers_on_ours': [ours_in_tokenizers.encode(s, add_special_tokens=True).ids for s in strings],
        'ids_transformers_on_ours': [ours_in_transformers.encode(s, add_special_tokens=True) for s in strings],
        'conversations': conversations,
        'chat': [reference_tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations],
        'chat_transformers_on_ours': [ours_in_transformers.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations],
    }
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    result['weights_sha256'] = {k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest()
                                for k, v in model.state_dict().items() if k != 'lm_head.weight'}
    prompts = [reference_tok.apply_chat_template(c, tokenize=True, add_generation_prompt=True, return_dict=False) for c in conversations]
    prompts = [list(p['input_ids']) if isinstance(p, dict) else list(p) for p in prompts]
    prompts.append(reference_tok.encode('The capital of France is', add_special_tokens=True))
    result['prompts'] = prompts
    tensors = {}
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits = model(torch.tensor([p])).logits[0]
            tensors[f'last.{i}'] = logits[-1].contiguous()
        tensors['all.3'] = model(torch.tensor([prompts[3]])).logits[0].contiguous()
        question = prompts[2]
        answer = model.generate(torch.tensor([question]), max_new_tokens=24, do_sample=False)[0][len(question):].tolist()
    result['greedy'] = {'prompt': question, 'tokens': answer, 'text': reference_tok.decode(answer)}
    save_torch(tensors, os.path.join(out, 'smollm2-logits.safetensors'))
    with open(os.path.join(out, 'smollm2.json'), 'w') as f:
        json.dump(result, f)


if __name__ == '__main__':
    command, *args = sys.argv[1:]
    {'quants': quants, 'tiny': tiny, 'smollm2': smollm2}[command](*args)
