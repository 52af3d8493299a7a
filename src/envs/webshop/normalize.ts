/**
 * WebShop's colour normalisation (engine/normalize.py): an option value becomes the first
 * base colour word it contains, in this list's order, so "dark navy blue" and "navy" compare
 * equal. Matching is by substring, as in the original ("standard" contains "tan"); kept as is
 * because the reward must equal the original's.
 */
export const COLOR_SET = [
  'alabaster', 'apricot', 'aqua', 'ash', 'asphalt', 'azure', 'banana', 'beige', 'black', 'blue',
  'blush', 'bordeaux', 'bronze', 'brown', 'burgundy', 'camel', 'camo', 'caramel', 'champagne',
  'charcoal', 'cheetah', 'chestnut', 'chocolate', 'christmas', 'coffee', 'cognac', 'copper', 'coral',
  'cranberry', 'cream', 'crystal', 'dark', 'denim', 'eggplant', 'elephant', 'espresso', 'fuchsia',
  'gold', 'granite', 'grape', 'graphite', 'grass', 'gray', 'green', 'grey', 'heather', 'indigo',
  'ivory', 'ivy', 'khaki', 'lavender', 'lemon', 'leopard', 'light', 'lilac', 'lime', 'magenta',
  'maroon', 'mauve', 'merlot', 'midnight', 'mint', 'mocha', 'multicolor', 'mushroom', 'mustard',
  'natural', 'navy', 'nude', 'olive', 'orange', 'peach', 'pewter', 'pink', 'plum', 'purple',
  'rainbow', 'red', 'rose', 'royal', 'rust', 'sand', 'sapphire', 'seashell', 'silver', 'skull',
  'slate', 'steel', 'stone', 'stonewash', 'sunflower', 'tan', 'taupe', 'teal', 'tiger', 'turquoise',
  'violet', 'walnut', 'wheat', 'white', 'wine', 'yellow',
];

export function normalizeColor(value: string): string {
  for (const color of COLOR_SET) if (value.includes(color)) return color;
  return value;
}
