// bizrq's islands: loads the WASM bundle, then hydrates every
// <leptos-island> of the page, as Leptos' own islands script does
// (leptos/src/hydration/island_script.js), from bizrq's own origin so the
// Content-Security-Policy needs no inline script.
import init, * as islands from './bizrq_islands.js';

const childrenCallbacks = [];

async function traverse(node) {
  if (node.nodeType !== Node.ELEMENT_NODE) return;
  const tag = node.tagName.toLowerCase();
  if (tag === 'leptos-island') {
    const hydrateFn = islands[node.dataset.component];
    if (hydrateFn) {
      const cb = childrenCallbacks[childrenCallbacks.length - 1];
      if (cb) cb();
      const res = hydrateFn(node);
      if (res && res.then) await res;
    } else {
      console.warn(`bizrq: no WASM function for the island ${node.dataset.component}`);
    }
  } else if (tag === 'leptos-children') {
    childrenCallbacks.push(node.$$on_hydrate);
    for (const child of node.children) await traverse(child);
    childrenCallbacks.pop();
    return;
  }
  for (const child of node.children) await traverse(child);
}

await init({ module_or_path: new URL('./bizrq_islands_bg.wasm', import.meta.url) });
islands.hydrate();
await traverse(document.body);
document.documentElement.dataset.islands = 'ready';
