"""
Reference checkpoints and outputs for hf.test.ts, made with PyTorch `transformers` and PEFT.

  make_reference.py build OUT     tiny random Qwen2 / Llama checkpoints in OUT (fp32 single file,
                                  fp32 sharded, bf16, fp16), their logits and log-probs on a few
                                  token sequences, chat-template renderings, and a PEFT LoRA adapter
                                  with non-zero B and its logits; everything numeric in OUT/reference.json
  make_reference.py peft BASE ADAPTER OUT_JSON
                                  loads ADAPTER (written by our engine) onto BASE with PEFT and
                                  writes the logits of the sequences in BASE/../reference.json

Weights are drawn wider than transformers' init (std 0.3; norms and biases perturbed too) so the
outputs are far from uniform and a wrong detail shows up in the comparison.
"""
import json
import os
import shutil
import sys

import torch

torch.set_num_threads(2)
torch.manual_seed(0)

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

SPECIAL = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<|begin_of_text|>', '<|eot_id|>', '<|start_header_id|>', '<|end_header_id|>']
CORPUS = [
    'You are in the hall. You see a red box, a blue drawer and a door to the kitchen.',
    'go to kitchen', 'open red box', 'take yellow hat', 'put yellow hat in red box', 'look around',
    'The red box is open. Inside it: a yellow hat.', 'You are a helpful assistant.', 'What is 2 + 2?',
    'system user assistant tool', 'Cutting Knowledge Date: December 2023',
]
VOCAB = 320

# A ChatML template in the style of Qwen2.5's: a default system turn when none is given,
# tool definitions as JSON, tool results grouped in a user turn.
CHATML = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}\n"
    "    {{- '\\n\\n# Tools\\n<tools>' }}\n"
    "    {%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}\n"
    "    {{- '\\n</tools><|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) or message.role == 'assistant' %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content | trim + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == 'tool' %}\n"
    "        {%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}\n"
    "        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

# A Llama-3-style template: bos first, header tokens around each role, <|eot_id|> after each turn,
# a fixed knowledge-date preamble in the system turn.
LLAMA3 = (
    "{{- bos_token }}\n"
    "{%- set ns = namespace(system='') %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set ns.system = messages[0]['content'] | trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- endif %}\n"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}\n"
    "{{- 'Cutting Knowledge Date: December 2023\\n\\n' }}\n"
    "{{- ns.system + '<|eot_id|>' }}\n"
    "{%- for message in messages %}\n"
    "    {%- if message['role'] not in ['user', 'assistant'] %}{{ raise_exception('unknown role ' + message['role']) }}{%- endif %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)

CHATS = [
    [{'role': 'user', 'content': 'go to kitchen'}],
    [{'role': 'system', 'content': 'You are an agent in a text world.'}, {'role': 'user', 'content': '  look around  '}],
    [
        {'role': 'system', 'content': 'Be brief.'},
        {'role': 'user', 'content': 'What is 2 + 2?'},
        {'role': 'assistant', 'content': '4'},
        {'role': 'user', 'content': 'And 3 + 3?\nThink.'},
    ],
]
CHATML_TOOL_CHAT = [
    {'role': 'user', 'content': 'open red box'},
    {'role': 'assistant', 'content': 'calling the tool'},
    {'role': 'tool', 'content': 'The red box is open.'},
    {'role': 'tool', 'content': 'Inside it: a yellow hat.'},
]
TOOLS = [{'type': 'function', 'function': {'name': 'open', 'description': 'Open a container', 'parameters': {'type': 'object', 'properties': {'what': {'type': 'string'}}}}}]


def build_tokenizer(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.save(path)


def perturb(model, seed):
    """Wide random weights, non-trivial norms and biases."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith('norm.weight'):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith('.bias'):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def save_tokenizer_files(tok_json, model_dir, template, bos, eos, template_in_config):
    fast = PreTrainedTokenizerFast(tokenizer_file=tok_json, bos_token=bos, eos_token=eos, pad_token='<|endoftext|>', unk_token=None)
    fast.chat_template = template
    fast.save_pretrained(model_dir)
    jinja = os.path.join(model_dir, 'chat_template.jinja')
    if template_in_config:
        # transformers 5 writes the template to chat_template.jinja; the older layout (and most
        # checkpoints on the Hub) keeps it in tokenizer_config.json.
        cfg_path = os.path.join(model_dir, 'tokenizer_config.json')
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg['chat_template'] = template
        with open(cfg_path, 'w') as f:
            json.dump(cfg, f, indent=2)
        if os.path.exists(jinja):
            os.remove(jinja)


def outputs(model, sequences):
    """Logits [T, V] of every sequence alone, and log p(token_t | tokens_<t) for t >= 1."""
    logits, logprobs = [], []
    with torch.no_grad():
        for seq in sequences:
            ids = torch.tensor([seq])
            out = model(input_ids=ids).logits[0].float()
            logits.append(out.tolist())
            lp = torch.log_softmax(out[:-1].double(), dim=-1).gather(1, ids[0, 1:, None]).squeeze(1)
            logprobs.append(lp.tolist())
    return {'logits': logits, 'logprobs': logprobs}


def renders(model_dir, chats, tools_chat=None):
    tok = AutoTokenizer.from_pretrained(model_dir)
    result = []
    for messages in chats:
        for gen in (False, True):
            result.append({'messages': messages, 'add_generation_prompt': gen, 'text': tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)})
    if tools_chat:
        result.append({'messages': tools_chat, 'add_generation_prompt': True, 'tools': TOOLS, 'text': tok.apply_chat_template(tools_chat, tools=TOOLS, tokenize=False, add_generation_prompt=True)})
    return result


def build(out):
    os.makedirs(out, exist_ok=True)
    tok_json = os.path.join(out, 'tokenizer-src.json')
    build_tokenizer(tok_json)
    gen = torch.Generator().manual_seed(1)
    sequences = [torch.randint(0, 300, (n,), generator=gen).tolist() for n in (2, 5, 9, 13)]
    ref = {'sequences': sequences, 'models': {}, 'chat': {}}

    qwen = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-6,
        bos_token_id=None, eos_token_id=SPECIAL.index('<|im_end|>'),
    )).float().eval()
    perturb(qwen, 11)
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, tie_word_embeddings=False, attention_bias=True, mlp_bias=True,
        rope_theta=500000.0, rms_norm_eps=1e-5, bos_token_id=SPECIAL.index('<|begin_of_text|>'), eos_token_id=SPECIAL.index('<|eot_id|>'),
    )).float().eval()
    perturb(llama, 12)

    layouts = [
        ('qwen2-fp32', qwen, torch.float32, None, CHATML, None, '<|im_end|>', True),
        ('qwen2-bf16', qwen, torch.bfloat16, None, CHATML, None, '<|im_end|>', False),
        ('llama-fp32-sharded', llama, torch.float32, '20KB', LLAMA3, '<|begin_of_text|>', '<|eot_id|>', True),
        ('llama-fp16-sharded', llama, torch.float16, '20KB', LLAMA3, '<|begin_of_text|>', '<|eot_id|>', True),
    ]
    for name, model, dtype, shard, template, bos, eos, template_in_config in layouts:
        d = os.path.join(out, name)
        kwargs = {'max_shard_size': shard} if shard else {}
        model.to(dtype).save_pretrained(d, safe_serialization=True, **kwargs)
        model.float()
        save_tokenizer_files(tok_json, d, template, bos, eos, template_in_config)
        # What a user of transformers gets: the saved weights, upcast to fp32 and run in fp32.
        reloaded = AutoModelForCausalLM.from_pretrained(d, dtype=dtype).float().eval()
        ref['models'][name] = {'dir': d, 'files': sorted(os.listdir(d)), **outputs(reloaded, sequences)}

    # Scaled rotary embeddings, scored on sequences longer than the "original" context (32) they
    # extend: llama3 and YaRN as transformers 5 writes them (rope_parameters), linear in the
    # transformers 4 form (rope_theta + rope_scaling) that most checkpoints on the Hub still carry.
    ref['long_sequences'] = [torch.randint(0, 300, (n,), generator=gen).tolist() for n in (40, 64)]
    scaled = [
        ('llama-rope-llama3', LlamaForCausalLM, LlamaConfig, 21, dict(head_dim=16, intermediate_size=48, num_key_value_heads=1),
         {'rope_type': 'llama3', 'rope_theta': 10000.0, 'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, 'original_max_position_embeddings': 32}, None),
        ('qwen2-rope-yarn', Qwen2ForCausalLM, Qwen2Config, 22, dict(intermediate_size=64, num_key_value_heads=2),
         {'rope_type': 'yarn', 'rope_theta': 10000.0, 'factor': 4.0, 'original_max_position_embeddings': 32}, None),
        ('llama-rope-linear-v4', LlamaForCausalLM, LlamaConfig, 23, dict(head_dim=16, intermediate_size=48, num_key_value_heads=2),
         {'rope_type': 'default', 'rope_theta': 10000.0}, {'type': 'linear', 'factor': 2.0}),
    ]
    for name, model_cls, config_cls, seed, extra, rope, legacy in scaled:
        model = model_cls(config_cls(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, tie_word_embeddings=False,
            rms_norm_eps=1e-5, max_position_embeddings=128, rope_parameters=rope, bos_token_id=None, eos_token_id=0, **extra,
        )).float().eval()
        perturb(model, seed)
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        if legacy is not None:
            with open(os.path.join(d, 'config.json')) as f:
                cfg = json.load(f)
            cfg['rope_theta'] = cfg.pop('rope_parameters')['rope_theta']
            cfg['rope_scaling'] = legacy
            with open(os.path.join(d, 'config.json'), 'w') as f:
                json.dump(cfg, f, indent=2)
        save_tokenizer_files(tok_json, d, CHATML, None, '<|im_end|>', False)
        reloaded = AutoModelForCausalLM.from_pretrained(d).float().eval()
        # The checkpoint really carries the scaling it is named after, as transformers reads it.
        rope_type = reloaded.config.rope_parameters['rope_type']
        assert rope_type == (legacy or rope).get('type', (legacy or rope).get('rope_type')), (name, reloaded.config.rope_parameters)
        ref['models'][name] = {'dir': d, 'files': sorted(os.listdir(d)), 'rope_type': rope_type, **outputs(reloaded, ref['long_sequences'])}

    ref['chat']['qwen2-fp32'] = renders(os.path.join(out, 'qwen2-fp32'), CHATS, CHATML_TOOL_CHAT)
    ref['chat']['qwen2-bf16'] = renders(os.path.join(out, 'qwen2-bf16'), CHATS[:1])
    ref['chat']['llama-fp32-sharded'] = renders(os.path.join(out, 'llama-fp32-sharded'), CHATS)

    # A PEFT adapter with non-zero A and B (PEFT starts B at zero, which would hide a wrong B).
    from peft import LoraConfig, PeftModel, get_peft_model
    base = AutoModelForCausalLM.from_pretrained(os.path.join(out, 'llama-fp32-sharded')).eval()
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=12, lora_dropout=0.1, target_modules=['q_proj', 'v_proj', 'o_proj', 'gate_proj', 'down_proj'], task_type='CAUSAL_LM'))
    g = torch.Generator().manual_seed(13)
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if 'lora_' in pname:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    adapter_dir = os.path.join(out, 'peft-adapter')
    peft_model.save_pretrained(adapter_dir)
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(os.path.join(out, 'llama-fp32-sharded')), adapter_dir).eval()
    ref['peft_adapter'] = {'dir': adapter_dir, 'base': os.path.join(out, 'llama-fp32-sharded'), **outputs(reloaded, sequences)}

    with open(os.path.join(out, 'reference.json'), 'w') as f:
        json.dump(ref, f)


def peft_logits(base_dir, adapter_dir, out_json, sequences):
    from peft import PeftModel
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir).eval()
    with open(out_json, 'w') as f:
        json.dump(outputs(model, sequences), f)


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == 'build':
        build(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == 'peft':
        with open(os.path.join(os.path.dirname(os.path.abspath(sys.argv[2])), 'reference.json')) as f:
            seqs = json.load(f)['sequences']
        peft_logits(sys.argv[2], sys.argv[3], sys.argv[4], seqs)
    else:
        sys.exit(__doc__)
