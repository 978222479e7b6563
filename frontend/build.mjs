// Builds the tab's ES module into ../tb_attn_plugin/static/: one minified, self-contained file
// (TensorBoard's CSP allows no outside scripts) plus the bundled libraries' licences.
// Deterministic: no timestamps, no absolute paths, no source maps.

import { build } from "esbuild";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// TB_ATTN_STATIC_OUT redirects the output (the test that compares a fresh build with the
// shipped one builds into a temporary directory).
const outdir = process.env.TB_ATTN_STATIC_OUT || join(here, "..", "tb_attn_plugin", "static");

await mkdir(outdir, { recursive: true });
await build({
  absWorkingDir: here,
  entryPoints: ["src/index.ts"],
  outfile: join(outdir, "index.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2020"],
  minify: true,
  sourcemap: false,
  legalComments: "none",
  charset: "ascii",
  treeShaking: true,
  define: { "process.env.NODE_ENV": '"production"', __DEV__: "false" },
  logLevel: "warning",
});

// The bundled packages' licences, in a fixed order.
const bundled = ["echarts", "zrender", "tslib"];
let text = "Third-party software bundled in index.js\n";
for (const name of bundled) {
  const pkg = JSON.parse(await readFile(join(here, "node_modules", name, "package.json"), "utf8"));
  const dir = join(here, "node_modules", name);
  const license = await readFirst(dir, ["LICENSE", "LICENSE.txt"]);
  const notice = await readFirst(dir, ["NOTICE"], true);
  text += `\n${"=".repeat(78)}\n${name} ${pkg.version} (${pkg.license})\n${"=".repeat(78)}\n\n${license.trim()}\n`;
  if (notice) text += `\n${notice.trim()}\n`;
}
await writeFile(join(outdir, "LICENSES.txt"), text);

async function readFirst(dir, names, optional = false) {
  for (const n of names) {
    try {
      return await readFile(join(dir, n), "utf8");
    } catch {
      // try the next name
    }
  }
  if (optional) return "";
  throw new Error(`no ${names.join(" or ")} in ${dir}`);
}
