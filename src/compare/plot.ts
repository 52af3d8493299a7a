/**
 * The learning-curve figure: held-out mean score against training environment steps, one line
 * per config (mean over runs) with a band from the lowest to the highest run. Drawn with
 * Vega-Lite → Vega (headless, SVG renderer) and rasterised with resvg, so it needs neither a
 * browser nor a network connection.
 */
import { writeFileSync } from 'node:fs';
import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { Comparison } from './aggregate.ts';

export interface PlotFiles {
  svg: string;
  png: string;
}

export function learningCurveSpec(cmp: Comparison, title = 'Held-out mean score vs training environment steps'): TopLevelSpec {
  const values = cmp.configs.flatMap((c) =>
    c.curve.map((p) => ({ config: c.label, steps: p.x, mean: p.mean, min: p.min, max: p.max, runs: p.n })),
  );
  const runs = cmp.configs.map((c) => c.included.length);
  const runsText =
    Math.min(...runs) === Math.max(...runs)
      ? `${runs[0]} run${runs[0] === 1 ? '' : 's'} per config`
      : `${Math.min(...runs)}–${Math.max(...runs)} runs per config`;
  const x = { field: 'steps', type: 'quantitative' as const, title: 'training environment steps' };
  const color = { field: 'config', type: 'nominal' as const, title: 'config', sort: cmp.configs.map((c) => c.label) };
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: title,
      subtitle: [
        `line: mean over runs; band: min–max over runs (${runsText})`,
        ...(cmp.equalSteps.length > 0 ? ['dashed: where the table compares configs at equal steps'] : []),
      ],
    },
    width: 640,
    height: 360,
    background: 'white',
    padding: 12,
    // The legend takes its symbols from the faint band otherwise. Labels are never cut short:
    // compare labels often share a long prefix (empo2-rehearsal-valid, empo2-rehearsal-valid-paper)
    // and Vega's default 160 px limit made them read the same.
    config: { legend: { symbolOpacity: 1, symbolType: 'stroke', symbolStrokeWidth: 3, labelLimit: 0 } },
    data: { values },
    layer: [
      {
        mark: { type: 'area', opacity: 0.18 },
        encoding: { x, y: { field: 'min', type: 'quantitative' }, y2: { field: 'max' }, color },
      },
      {
        mark: { type: 'line', point: true, strokeWidth: 2 },
        encoding: { x, y: { field: 'mean', type: 'quantitative', title: 'held-out mean score (0–100)' }, color },
      },
      ...cmp.equalSteps.map((steps) => ({
        data: { values: [{ steps }] },
        mark: { type: 'rule' as const, strokeDash: [4, 4], color: '#888' },
        encoding: { x: { field: 'steps', type: 'quantitative' as const } },
      })),
    ],
  } as TopLevelSpec;
}

export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

export function svgToPng(svg: string, scale = 2): Buffer {
  // Vega's default font stack is sans-serif; resvg needs a concrete family to fall back on.
  const resvg = new Resvg(svg, {
    background: 'white',
    fitTo: { mode: 'zoom', value: scale },
    font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans', sansSerifFamily: 'DejaVu Sans' },
  });
  return resvg.render().asPng();
}

/** Writes `<base>.svg` and `<base>.png`. */
export async function writeLearningCurvePlot(cmp: Comparison, base: string): Promise<PlotFiles> {
  if (cmp.configs.every((c) => c.curve.length === 0)) throw new Error('nothing to plot: no run has an evaluation to draw');
  const svg = await renderSvg(learningCurveSpec(cmp));
  const files = { svg: `${base}.svg`, png: `${base}.png` };
  writeFileSync(files.svg, svg);
  writeFileSync(files.png, svgToPng(svg));
  return files;
}
