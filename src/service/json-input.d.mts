export function badJsonValue(value: unknown): { path: string; message: string; keyword: string } | null;
