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


def random_blocks(qtype, rows, cols):
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block_size
    blocks = RNG.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for offset in SCALE_FIELDS[qtype]:
        # Scales across the f16 range, subnormals and negatives included.
        scales = (RNG.standard_normal(n_blocks) * 10.0 ** RNG.integers(-6, 3, n_blocks)).astype(np.float16)
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


if __name__ == '__main__':
    command, *args = sys.argv[1:]
    {'quants': quants}[command](*args)
