/** What every `denv import` (and `denv export harbor`) says the same way, whatever the format. */
export const ImportMessages = {
  unsupported: (file: string, key: string, reason: string) => `${file}: '${key}' cannot be mapped: ${reason}`,
  notEmpty: (dir: string) => `${dir} is not empty: write into a new or empty directory`,
} as const;
