// JSON-schema parts the operator's live view and the modes' figures in it share. Imports nothing,
// so a mode's figures (admission/*/live.ts) use it without reaching the routes.

/** A count, as every figure of the live view is. */
export const count = (description: string) => ({ type: 'integer', description });

/** A mode's figures in the live view: an object with every one of `properties`, null for sales of other modes. */
export const figuresSchema = (description: string, properties: Record<string, unknown>) => ({
  type: 'object',
  nullable: true,
  description,
  required: Object.keys(properties),
  properties,
});
