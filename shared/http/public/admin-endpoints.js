// The shop's receivers of outbound events (docs/events.md), through the admin API's
// /api/events/endpoints: listed with what is pending to each, added (its secret shown once, here,
// and never again), a secret rotated (the new one shown once), disabled and enabled.
import { when } from './admin-sales.js';
import { $, api, failed, show } from './admin-session.js';

const cell = (content) => {
  const td = document.createElement('td');
  td.append(content);
  return td;
};

function button(text, testId, onClick) {
  const b = Object.assign(document.createElement('button'), {
    type: 'button',
    className: 'secondary',
    textContent: text,
  });
  b.dataset.testid = testId;
  b.addEventListener('click', () => void onClick());
  return b;
}

/** Shows a secret the API hands out once: who is to keep it copies it from here. */
function showSecret(id, secret) {
  $('endpoint-secret-for').textContent = id;
  $('endpoint-secret').textContent = secret;
  $('endpoint-secret-box').hidden = false;
}

/** At sign-out: a secret shown is not left in the page for whoever signs in next. */
export function forgetSecret() {
  $('endpoint-secret').textContent = '';
  $('endpoint-secret-box').hidden = true;
}

async function act(path, then) {
  try {
    then(await api('POST', path));
    show('endpoint-message', '');
  } catch (err) {
    if (err.status === 404 || err.status === 400) show('endpoint-message', err.message);
    else failed(err);
  }
  await loadEndpoints();
}

function row(e) {
  const tr = document.createElement('tr');
  tr.dataset.testid = 'endpoint-row';
  tr.dataset.endpoint = e.id;
  const name = document.createElement('div');
  const id = Object.assign(document.createElement('code'), { textContent: e.id });
  name.append(e.url, document.createElement('br'), id);
  const state = cell(e.enabled ? 'Enabled' : `Disabled: ${e.disabledReason}`);
  state.dataset.testid = 'endpoint-state';
  const path = `/api/events/endpoints/${encodeURIComponent(e.id)}`;
  const actions = document.createElement('td');
  actions.className = 'actions';
  actions.append(
    e.enabled
      ? button('Disable', 'endpoint-disable', () => act(`${path}/disable`, () => {}))
      : button('Enable', 'endpoint-enable', () => act(`${path}/enable`, () => {})),
    button('Rotate secret', 'endpoint-rotate', () => act(`${path}/rotate`, (r) => showSecret(r.id, r.secret))),
  );
  const pending = cell(String(e.pending));
  pending.dataset.testid = 'endpoint-pending';
  tr.append(
    cell(name),
    cell(e.eventTypes.join(', ') || 'every type'),
    state,
    cell(when(e.failingSince)),
    pending,
    actions,
  );
  return tr;
}

export async function loadEndpoints() {
  try {
    const { endpoints } = await api('GET', '/api/events/endpoints');
    $('endpoints-empty').hidden = endpoints.length > 0;
    $('endpoints').replaceChildren(...endpoints.map(row));
  } catch (err) {
    failed(err);
  }
}

export async function addEndpoint(event) {
  event.preventDefault();
  const types = $('endpoint-types')
    .value.split(',')
    .map((t) => t.trim())
    .filter(Boolean);
  const id = $('endpoint-id').value.trim();
  const body = {
    url: $('endpoint-url').value.trim(),
    ...(types.length ? { eventTypes: types } : {}),
    ...(id ? { id } : {}),
  };
  try {
    const added = await api('POST', '/api/events/endpoints', body);
    event.target.reset();
    show('endpoint-message', '');
    showSecret(added.id, added.secret);
  } catch (err) {
    if (err.status === 400 || err.status === 409) show('endpoint-message', err.message);
    else failed(err);
  }
  await loadEndpoints();
}
