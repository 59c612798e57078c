// The operator's page: sign in with the admin token, list the sales (admin-sales.js), create one
// (admin-sale-form.js), follow one live (admin-live.js, its chart admin-chart.js), and manage the
// endpoints of outbound events (admin-endpoints.js).
import { endSale, moveShownEnd, openFromHash, pauseShown, stopLive } from './admin-live.js';
import { resizeChart } from './admin-chart.js';
import { addEndpoint, forgetSecret, loadEndpoints } from './admin-endpoints.js';
import { createSale, showAdmission, stockOptional } from './admin-sale-form.js';
import { loadSales, moreSales } from './admin-sales.js';
import { $, keepToken, onSignOut, show, signedIn, signOut, useToken } from './admin-session.js';

const SALES_POLL_MS = 5000;

// The list, and on its first answer for a new token, the console: the token works, kept for this tab.
async function signIn() {
  if (!(await loadSales()) || !$('console').hidden || !signedIn()) return;
  keepToken();
  $('sign-in').hidden = true;
  $('console').hidden = false;
  $('sign-out').hidden = false;
  show('message', '');
  openFromHash();
  void loadEndpoints();
}

onSignOut(() => {
  stopLive();
  forgetSecret();
});
$('token-form').addEventListener('submit', (event) => {
  event.preventDefault();
  useToken($('token').value.trim());
  $('token').value = '';
  void signIn();
});
$('sign-out').addEventListener('click', () => signOut());
$('sales-more').addEventListener('click', moreSales);
$('create-form').addEventListener('submit', (event) => void createSale(event));
$('create-admission').addEventListener('change', showAdmission);
showAdmission();
$('create-sizes').addEventListener('input', stockOptional);
$('endpoint-form').addEventListener('submit', (event) => void addEndpoint(event));
$('end-sale').addEventListener('click', () => void endSale());
$('pause-sale').addEventListener('click', () => pauseShown(true));
$('resume-sale').addEventListener('click', () => pauseShown(false));
$('end-time-form').addEventListener('submit', moveShownEnd);
$('close-live').addEventListener('click', () => {
  location.hash = '';
});
window.addEventListener('hashchange', openFromHash);
window.addEventListener('resize', resizeChart);
setInterval(() => {
  if (signedIn() && !$('console').hidden) {
    void loadSales();
    void loadEndpoints();
  }
}, SALES_POLL_MS);

if (signedIn()) void signIn();
else signOut();
