// Datasets: list, versions, one version, delete, the three-step upload, preview and download.
import type { RouteDef } from '../router.ts';
import { reply } from '../router.ts';
import { requestBaseUrl } from '../../src/service/signed-urls.ts';
import { sendFile } from './files.ts';

const name = { type: 'string', minLength: 1, maxLength: 128 };

export function datasetRoutes(): RouteDef[] {
  return [
    { method: 'GET', path: '/felix/datasets', auth: 'any', handler: ({ services, principal }) => services.datasets.list(principal) },
    {
      method: 'POST', path: '/felix/datasets/upload/url', auth: 'any',
      body: {
        type: 'object', required: ['dataset_name', 'dataset_type', 'filename'],
        properties: { dataset_name: name, dataset_type: { enum: ['ner', 'classification', 'decoder', 'custom'] }, filename: { type: 'string', minLength: 1, maxLength: 255 } },
      },
      handler: ({ services, principal, body, headers }) => services.datasets.createUpload(principal, body, requestBaseUrl(headers, services.config.publicUrl, services.config.trustProxy)),
    },
    {
      // the presigned URL: the signature is the credential (no API key), single use, size-limited
      method: 'PUT', path: '/felix/datasets/upload/:upload_id', auth: 'none', params: { upload_id: 'uuid' }, rawBody: true,
      query: { expires: { type: 'integer' }, signature: { type: 'string' } },
      maxBodyBytes: (cfg) => cfg.maxUploadBytes,
      async handler({ services, params, query, body, url }) {
        services.signedUrls.verify('PUT', url, query);
        return services.datasets.receiveUpload(params.upload_id, body);
      },
    },
    {
      method: 'POST', path: '/felix/datasets/upload/process', auth: 'any',
      body: {
        type: 'object', required: ['dataset_name'],
        properties: { dataset_name: name, upload_id: { type: 'string', format: 'uuid' }, version_id: { type: 'string', minLength: 1 }, version_number: { type: 'string', minLength: 1 } },
      },
      handler: ({ services, principal, body }) => services.datasets.process(principal, body),
    },
    {
      method: 'GET', path: '/felix/datasets/:name', auth: 'any', params: { name: 'string' },
      handler: ({ services, principal, params }) => services.datasets.versions(principal, params.name),
    },
    {
      method: 'DELETE', path: '/felix/datasets/:name', auth: 'any', params: { name: 'string' },
      async handler({ services, principal, params }) {
        await services.datasets.remove(principal, params.name);
        return reply(200, '', { 'Content-Type': 'application/json' });
      },
    },
    {
      method: 'GET', path: '/felix/datasets/:name/:version', auth: 'any', params: { name: 'string', version: 'string' },
      handler: ({ services, principal, params }) => services.datasets.version(principal, params.name, params.version),
    },
    {
      method: 'GET', path: '/felix/datasets/:name/:version/preview', auth: 'any', params: { name: 'string', version: 'string' },
      query: { limit: { type: 'integer', min: 1, max: 1000, default: 20 }, offset: { type: 'integer', min: 0, default: 0 } },
      handler: ({ services, principal, params, query }) => services.datasets.preview(principal, params.name, params.version, query.limit, query.offset),
    },
    {
      method: 'GET', path: '/felix/datasets/:name/:version/download', auth: 'any', params: { name: 'string', version: 'string' },
      async handler({ services, principal, params, stream }) {
        const f = await services.datasets.download(principal, params.name, params.version);
        await sendFile(stream, f.path, { 'Content-Type': 'application/x-ndjson; charset=utf-8', 'Content-Disposition': `attachment; filename="${f.filename}"` });
      },
    },
  ];
}
