/** `empo2 import-gguf`: a GGUF file converted to a Hugging Face model directory usable as model.path. */
import type { Command } from 'commander';

export function register(program: Command): void {
  program
    .command('import-gguf')
    .description(
      'convert a Llama- or Qwen2-architecture GGUF file (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K) to a Hugging Face model directory usable as model.path',
    )
    .argument('<file>', 'the .gguf file')
    .requiredOption(
      '--out <dir>',
      'the model directory to write (config.json, model.safetensors, tokenizer.json, tokenizer_config.json, generation_config.json)',
    )
    .option('--replace', 'replace --out when it already exists')
    .action(async (file: string, opts) => {
      const { importGguf } = await import('../../policy/gguf/import.ts');
      const started = Date.now();
      const result = await importGguf(file, opts.out, { replace: !!opts.replace, log: (l) => console.log(l) });
      const types = Object.entries(result.types)
        .map(([t, n]) => `${n} ${t}`)
        .join(', ');
      console.log(
        `imported ${file} (${result.architecture}, ${result.parameters.toLocaleString()} parameters; tensors: ${types}) into ${result.dir} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
      );
    });
}
