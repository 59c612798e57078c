// The admin page's new-sale form, its inputs made from the sale's definition when the page is
// read: a field with a `form` part gets its input, so the form asks for what the server takes.
import { SALE_DEFINITION, shownOrder, type SaleField } from '../sales/definition.js';

/** Where admin.html takes the inputs. */
export const SALE_FORM_SLOT = '<!-- new-sale inputs: SALE_DEFINITION, shared/http/sale-form.ts -->';

const escapeHtml = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const attributes = (attrs: Record<string, string | true>) =>
  Object.entries(attrs)
    .map(([name, value]) => (value === true ? ` ${name}` : ` ${name}="${escapeHtml(value)}"`))
    .join('');

function input(key: SaleField, indent: string): string {
  const { kind, schema, form, only } = SALE_DEFINITION[key];
  const { label, testId, options, attrs = {} } = form!;
  const named = { name: key, 'data-testid': testId };
  // A setting of one admission: the page shows it only while that admission is chosen.
  const labelled = `${indent}<label${only ? attributes({ 'data-only': only }) : ''}>${escapeHtml(label)} `;
  if (kind === 'choice') {
    // The page leaves out a choice at its default, as it leaves out an empty input.
    const choices = Object.entries(options!)
      .map(([value, text]) => `<option value="${escapeHtml(value)}">${escapeHtml(text)}</option>`)
      .join('');
    return `${labelled}<select${attributes({ ...named, 'data-default': String(schema.default) })}>\n${indent}  ${choices}\n${indent}</select></label>`;
  }
  const type: Record<string, string> =
    kind === 'time' ? { type: 'datetime-local', step: '1' } : kind === 'text' ? {} : { type: 'number' };
  return `${labelled}<input${attributes({ ...named, ...type, ...attrs })}></label>`;
}

/** admin.html with the form's inputs in its slot, indented as the slot is. */
export function withSaleForm(html: string): string {
  const at = html.indexOf(SALE_FORM_SLOT);
  if (at < 0) throw new Error('admin.html has no slot for the new-sale inputs');
  const indent = html.slice(html.lastIndexOf('\n', at) + 1, at);
  return html.replace(
    `${indent}${SALE_FORM_SLOT}`,
    shownOrder('form')
      .map((key) => input(key, indent))
      .join('\n'),
  );
}
