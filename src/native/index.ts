// Typed wrappers over the native core.
export * from './cpu.ts';
export * from './gemm.ts';
export * from './tensor.ts';
export * from './ops.ts';
export * from './cuda.ts';
export { addon } from './addon.ts';
