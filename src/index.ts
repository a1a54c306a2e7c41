// Loom as a library: the native core, the runtimes and the services, importable without the server.
export * as native from './native/index.ts';
export * as encoder from './models/encoder/index.ts';
export * as service from './service/index.ts';
export * as decoder from './runtime/generate.ts';
export * as training from './training/index.ts';
