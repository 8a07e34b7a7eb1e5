/**
 * The package mirrors this host is configured for: the hosts of its apt sources (one-line
 * `deb` lists and deb822 `.sources` files) and pip's index (pip.conf `index-url`,
 * `extra-index-url`). A build of an rl-environment reaches these and nothing else.
 */
export declare function hostMirrors(root?: string): Promise<string[]>;
//# sourceMappingURL=host-mirrors.d.ts.map