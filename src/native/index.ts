// Typed wrappers over the native core.
export * from './cpu.ts';
export * from './gemm.ts';
export { addon } from './addon.ts';
