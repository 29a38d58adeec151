// ordo console: live updates. The page's <main> names an SSE stream (data-live-source) and the
// page to read again (data-live-page); on "changed" the page is fetched (same cookie, same
// checks) and its #live part replaces this one's. No content comes over the stream itself.
"use strict";
(function () {
  const main = document.getElementById("main");
  const status = document.getElementById("live-status");
  if (!main || !main.dataset.liveSource || !window.EventSource) return;
  let pending = null;
  let busy = false;

  function say(text) { if (status) status.textContent = text; }

  function editing(live) {
    const active = document.activeElement;
    return active && live.contains(active) && (active.tagName === "INPUT" || active.tagName === "TEXTAREA");
  }

  async function refresh() {
    pending = null;
    const live = document.getElementById("live");
    if (!live) return;
    if (busy || editing(live)) { schedule(1000); return; }
    busy = true;
    try {
      const response = await fetch(main.dataset.livePage, { credentials: "same-origin", headers: { "Accept": "text/html" } });
      if (!response.ok) { say("Live update failed: " + response.status); return; }
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = doc.getElementById("live");
      if (fresh) { live.replaceChildren(...Array.from(fresh.childNodes).map((n) => document.importNode(n, true))); }
      say("Updated " + new Date().toLocaleTimeString());
      document.body.dataset.liveUpdates = String(Number(document.body.dataset.liveUpdates || "0") + 1);
    } catch (err) {
      say("Live update failed");
    } finally {
      busy = false;
    }
  }

  function schedule(delay) { if (!pending) pending = setTimeout(refresh, delay); }

  const source = new EventSource(main.dataset.liveSource);
  source.addEventListener("open", () => { document.body.dataset.live = "open"; say("Live"); });
  source.addEventListener("changed", () => schedule(200));
  source.addEventListener("reload", () => { source.close(); window.location.reload(); });
  source.addEventListener("refused", (e) => { source.close(); say("Live updates refused: " + e.data); });
  window.addEventListener("pagehide", () => source.close());
})();
