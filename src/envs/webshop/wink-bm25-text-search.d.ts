// Types for the parts of wink-bm25-text-search (which ships none) that search.ts uses.
declare module 'wink-bm25-text-search' {
  interface BM25Config {
    fldWeights: Record<string, number>;
    bm25Params?: { k1?: number; b?: number; k?: number };
    ovFieldNames?: string[];
  }
  interface BM25Engine {
    defineConfig(config: BM25Config): boolean;
    definePrepTasks(tasks: Array<(input: any) => any>, field?: string): number;
    addDoc(doc: Record<string, string>, id: string): number;
    consolidate(precision?: number): boolean;
    search(text: string, limit?: number): Array<[string, number]>;
    getTotalDocs(): number;
  }
  export default function bm25(): BM25Engine;
}
