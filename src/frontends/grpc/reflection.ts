/**
 * gRPC server reflection (grpcurl, Postman, evans) for the services we
 * serve. @grpc/reflection reads serialized FileDescriptorProtos from a
 * proto-loader-style package definition; we build that from the
 * descriptors protobuf-es embeds in the generated code, so no .proto file
 * is read at run time.
 */
import { toBinary, type DescFile } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { ReflectionService } from '@grpc/reflection';
import type { Server } from '@grpc/grpc-js';
import { file_grpc_service } from '../../gen/grpc_service_pb.js';
import { file_health } from '../../gen/health_pb.js';
import { file_model_config } from '../../gen/model_config_pb.js';

type PackageDefinition = ConstructorParameters<typeof ReflectionService>[0];

function descriptorSet(files: readonly DescFile[]): Uint8Array[] {
  return files.map((f) => toBinary(FileDescriptorProtoSchema, f.proto));
}

/** What @grpc/reflection needs: one entry per service, each carrying the files that define it. */
export function reflectionPackageDefinition(): PackageDefinition {
  const inference = descriptorSet([file_model_config, file_grpc_service]);
  const health = descriptorSet([file_health]);
  return {
    'inference.GRPCInferenceService': { fileDescriptorProtos: inference },
    'grpc.health.v1.Health': { fileDescriptorProtos: health },
  } as unknown as PackageDefinition;
}

export function addReflection(server: Server): void {
  new ReflectionService(reflectionPackageDefinition()).addToServer(server);
}
