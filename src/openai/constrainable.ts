/**
 * A forced call's tool schemas and a JSON format's schema are what decoding is constrained to
 * (../policy/json-constraint.ts): one the constraint cannot take is a 400 naming it where the request is
 * read, in the endpoint's own field names (`tools[0].function.parameters` in Chat Completions,
 * `tools[0].parameters` in Responses).
 */
import { checkConstrainableSchema, JsonSchemaError } from '../policy/index.ts';
import { RequestError } from './errors.ts';
import type { FunctionTool, OutputFormat, ToolChoice } from './types.ts';

export function checkConstrainable(
  tools: readonly FunctionTool[],
  choice: ToolChoice,
  format: OutputFormat,
  fields: { toolParameters: (i: number) => string; formatSchema: string },
): void {
  const check = (schema: unknown, where: string) => {
    try {
      checkConstrainableSchema(schema, where);
    } catch (e) {
      if (!(e instanceof JsonSchemaError)) throw e;
      throw new RequestError(400, `"${e.path}": decoding cannot be constrained to this: ${e.message.slice(e.path.length + 2)}`, e.path);
    }
  };
  if (choice === 'required' || typeof choice === 'object')
    tools.forEach((t, i) => {
      if (t.parameters !== undefined && (choice === 'required' || t.name === choice.name)) check(t.parameters, fields.toolParameters(i));
    });
  if (format.type === 'json_schema') check(format.schema, fields.formatSchema);
}
