"""Timing probes run inside the Attention tab's iframe (``frame.evaluate``), shared by the
browser tests and ``bench/tab_latency.py``. Each resolves to milliseconds, or -1 when the view
shows an error instead of its content (so a broken run ends the wait too).
"""

from __future__ import annotations

__all__ = ["OPEN_AND_PAINT", "ROUTE_TIMINGS", "SHOW_AND_PAINT"]

#: From the click on a run's row to the frame in which its per-layer table is on screen; null if
#: the runs list has no such run.
OPEN_AND_PAINT = """run => new Promise(resolve => {
    const row = [...document.querySelectorAll('tr.run-row')]
        .find(r => r.getAttribute('aria-label') === 'Open run ' + run);
    if (!row) { resolve(null); return; }
    const t0 = performance.now();
    row.click();
    const check = () => {
        const t = document.querySelector('table.layers-table');
        const err = document.querySelector('.run-page [role=alert]');
        if ((t && t.offsetParent !== null && t.querySelector('tbody tr')) || err)
            requestAnimationFrame(() => resolve(err && !t ? -1 : performance.now() - t0));
        else requestAnimationFrame(check);
    };
    check();
})"""

#: From the click on a sub-view's tab (``[label, section selector]``) to the frame in which its
#: first canvas is drawn.
SHOW_AND_PAINT = """([label, section]) => new Promise(resolve => {
    const tab = [...document.querySelectorAll('[role=tab]')].find(b => b.textContent === label);
    const t0 = performance.now();
    tab.click();
    const check = () => {
        const c = document.querySelector(section + ' canvas');
        const err = document.querySelector(section + ' [role=alert]');
        if (c || err) requestAnimationFrame(() => resolve(err ? -1 : performance.now() - t0));
        else requestAnimationFrame(check);
    };
    check();
})"""

#: The summary, memory and timeline requests the page made: total and server time, bytes.
ROUTE_TIMINGS = """() => performance.getEntriesByType('resource')
    .filter(e => /\\/(summary|memory|timeline)\\?/.test(e.name))
    .map(e => ({route: e.name.match(/\\/(summary|memory|timeline)\\?/)[1], total_ms: e.duration,
                server_ms: e.responseStart - e.requestStart, encoded_bytes: e.encodedBodySize,
                bytes: e.decodedBodySize}))"""
