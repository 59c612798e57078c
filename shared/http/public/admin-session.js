// The operator's session: the admin token (kept in this tab's sessionStorage), the requests made
// with it, and the page's messages. A refused token ends the session: the page asks for the token
// again and says why.

export const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const TOKEN_KEY = 'flashsale.adminToken';

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let token = sessionStorage.getItem(TOKEN_KEY) ?? '';
export const signedIn = () => token !== '';

/** Tries `value` as the token: the next request that works keeps it (keepToken). */
export const useToken = (value) => void (token = value);
export const keepToken = () => sessionStorage.setItem(TOKEN_KEY, token);

export async function api(method, path, body) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch {
    throw new ApiError(0, 'network', 'Cannot reach the server; retrying…');
  }
  const data = await res.json().catch(() => null);
  if (!res.ok)
    throw new ApiError(
      res.status,
      data?.error ?? `http_${res.status}`,
      data?.message ?? `The server answered ${res.status}.`,
    );
  return data;
}

export const refused = (err) => err.status === 401 || err.status === 403;

export function show(testId, text) {
  const node = $(testId);
  node.hidden = !text;
  if (node.textContent !== text) node.textContent = text;
}

export function setText(testId, text) {
  const node = $(testId);
  if (node.textContent !== text) node.textContent = text;
}

// What else a sign-out ends (the live view); admin.js sets it.
let ending = () => {};
export const onSignOut = (fn) => void (ending = fn);

export function signOut(reason = '') {
  token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  ending();
  $('console').hidden = true;
  $('sign-out').hidden = true;
  $('sign-in').hidden = false;
  show('message', reason);
}

export function failed(err) {
  if (refused(err)) signOut(err.message);
  else show('message', err.message);
}
