// Accessibility checks of the pages with axe-core, run inside the page as it is shown (its CSP left
// on: the script is evaluated through the browser's devtools protocol, not added as a tag).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Page } from 'playwright-core';

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** The sizes the pages are checked at: a laptop, and a phone (an iPhone 12-15's CSS pixels). */
export const VIEWPORTS = { desktop: { width: 1280, height: 800 }, phone: { width: 390, height: 844 } } as const;

export interface Violation {
  rule: string;
  impact: string | null;
  help: string;
  /** The offending elements' selectors. */
  nodes: string[];
}

/** axe-core's violations of the page as it is now (WCAG 2.x A and AA and axe's best practices). */
export async function axeViolations(page: Page): Promise<Violation[]> {
  if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(AXE_SOURCE);
  return page.evaluate(async () => {
    const axe = (
      window as unknown as {
        axe: {
          run: () => Promise<{
            violations: { id: string; impact?: string | null; help: string; nodes: { target: unknown[] }[] }[];
          }>;
        };
      }
    ).axe;
    const { violations } = await axe.run();
    return violations.map((v) => ({
      rule: v.id,
      impact: v.impact ?? null,
      help: v.help,
      nodes: v.nodes.map((n) => n.target.map(String).join(' ')),
    }));
  });
}

/** Those a person meets as a barrier, not a nuisance: serious and critical. */
export const serious = (violations: Violation[]) =>
  violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');

/** What makes the page scroll sideways (its width, and the outermost elements past the window's edge), or null when it fits. */
export async function tooWide(page: Page): Promise<string | null> {
  // No named functions inside: the test's compiler would wrap them in a helper the page lacks.
  const { scrollWidth, width, past } = await page.evaluate(() => {
    const edge = window.innerWidth + 0.5;
    const past: string[] = [];
    for (const e of document.body.querySelectorAll('*')) {
      const parent = e.parentElement;
      if (e.getBoundingClientRect().right <= edge || (parent && parent.getBoundingClientRect().right > edge)) continue;
      let scrolled = false; // inside a box that scrolls (or clips) it: the page does not widen
      for (let a = parent; a && a !== document.body && !scrolled; a = a.parentElement)
        scrolled = getComputedStyle(a).overflowX !== 'visible';
      if (scrolled) continue;
      past.push(
        `${e.tagName.toLowerCase()}${typeof e.className === 'string' && e.className ? `.${e.className.trim().split(/\s+/).join('.')}` : ''}`,
      );
    }
    return { scrollWidth: document.documentElement.scrollWidth, width: window.innerWidth, past: past.slice(0, 5) };
  });
  return scrollWidth > width
    ? `${scrollWidth} px wide in a ${width} px window, past its edge: ${past.join(', ')}`
    : null;
}
