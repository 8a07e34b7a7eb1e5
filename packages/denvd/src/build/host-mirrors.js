import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
/**
 * The package mirrors this host is configured for: the hosts of its apt sources (one-line
 * `deb` lists and deb822 `.sources` files) and pip's index (pip.conf `index-url`,
 * `extra-index-url`). A build of an rl-environment reaches these and nothing else.
 */
export async function hostMirrors(root = "/") {
    const hosts = new Set();
    const add = (url) => {
        try {
            const h = new URL(url).hostname.toLowerCase();
            if (h)
                hosts.add(h);
        }
        catch {
            // not a URL (a comment, a cdrom: line)
        }
    };
    const apt = join(root, "etc/apt");
    const files = [join(apt, "sources.list")];
    for (const name of await readdir(join(apt, "sources.list.d")).catch(() => [])) {
        if (name.endsWith(".list") || name.endsWith(".sources"))
            files.push(join(apt, "sources.list.d", name));
    }
    for (const file of files) {
        const text = await readFile(file, "utf8").catch(() => "");
        for (const line of text.split("\n")) {
            const l = line.trim();
            if (l.startsWith("#"))
                continue;
            const deb = l.match(/^deb(?:-src)?\s+(?:\[[^\]]*\]\s+)?(\S+)/);
            if (deb?.[1])
                add(deb[1]);
            const uris = l.match(/^URIs:\s*(.+)$/i);
            if (uris?.[1])
                for (const u of uris[1].split(/\s+/))
                    add(u);
        }
    }
    for (const file of [join(root, "etc/pip.conf"), join(root, "etc/xdg/pip/pip.conf")]) {
        const text = await readFile(file, "utf8").catch(() => "");
        for (const m of text.matchAll(/^\s*(?:extra-)?index-url\s*=\s*(.+)$/gm)) {
            for (const u of (m[1] ?? "").split(/\s+/))
                add(u);
        }
    }
    return [...hosts].sort();
}
//# sourceMappingURL=host-mirrors.js.map