export const MAX_JSON_DEPTH: number;
export function badJsonValue(value: unknown, maxDepth?: number): { path: string; message: string; keyword: string } | null;
