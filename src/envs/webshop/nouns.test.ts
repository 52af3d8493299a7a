import { describe, expect, it } from 'vitest';
import { nounWords } from './nouns.ts';

describe('nounWords', () => {
  it('tags a text the same whatever the process read before', () => {
    // A shared wink-nlp instance learns "Women's" from the first name (followed by a comma) and
    // then stops splitting the possessive in the second: ["shein", "women's", ...].
    nounWords("Skechers Women's, Relaxed Fit: Arch Fit - Commute Clog Taupe 11 M");
    expect(nounWords("SheIn Women's Sexy One Shoulder Sleeveless Cutout Mini Club Pencil Bodycon Dress")).toEqual([
      'shein',
      'women',
      'sexy',
      'shoulder',
      'sleeveless',
      'cutout',
      'mini',
      'club',
      'pencil',
      'bodycon',
      'dress',
    ]);
  });

  it('keeps duplicates, lower-cases, and returns the cached list for a repeated text', () => {
    const first = nounWords('Tunic Dress Loose Tunic Pullover');
    expect(first).toEqual(['tunic', 'dress', 'loose', 'tunic', 'pullover']);
    expect(nounWords('Tunic Dress Loose Tunic Pullover')).toBe(first);
  });
});
