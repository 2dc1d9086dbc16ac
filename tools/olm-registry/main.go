// Command kfdef-olm-registry serves a file-based catalog over OLM's registry gRPC API, the API that
// catalog-operator asks for packages, channels and bundles. A CatalogSource with `spec.sourceType: grpc` and
// `spec.address: 127.0.0.1:PORT` points OLM at it directly: no catalog image, no registry pod.
//
// It is built inside OLM's own module (tools/build-olm.sh places this directory under its cmd/), so that it
// serves with the very operator-registry packages OLM v0.46.0 vendors: pkg/cache indexes the catalog and
// pkg/server answers the gRPC calls, as `opm serve` does in a catalog image.
//
//	kfdef-olm-registry -catalog DIR [-listen 127.0.0.1:0] [-cache-dir DIR]
//
// Once it serves, it prints one line, `serving 127.0.0.1:PORT`, on standard output. SIGTERM or SIGINT stop it
// gracefully. Exit codes: 0 stopped by a signal, 1 the catalog could not be loaded or served, 2 usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/operator-framework/operator-registry/pkg/api"
	"github.com/operator-framework/operator-registry/pkg/cache"
	"github.com/operator-framework/operator-registry/pkg/server"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	health "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	flags := flag.NewFlagSet("kfdef-olm-registry", flag.ContinueOnError)
	catalog := flags.String("catalog", "", "file-based catalog directory (required)")
	listen := flags.String("listen", "127.0.0.1:0", "address to serve on; a host is required (port 0 picks one)")
	cacheDir := flags.String("cache-dir", "", "where the catalog's index is kept (default: a temporary directory, removed on exit)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *catalog == "" || flags.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: kfdef-olm-registry -catalog DIR [-listen 127.0.0.1:0] [-cache-dir DIR]")
		return 2
	}
	// An empty host would listen on every address; this server is meant for loopback and says so.
	if host, _, err := net.SplitHostPort(*listen); err != nil || host == "" {
		fmt.Fprintf(os.Stderr, "kfdef-olm-registry: -listen %q: give a host and a port, e.g. 127.0.0.1:0\n", *listen)
		return 2
	}
	if err := serve(*catalog, *listen, *cacheDir); err != nil {
		fmt.Fprintf(os.Stderr, "kfdef-olm-registry: %v\n", err)
		return 1
	}
	return 0
}

func serve(catalog, listen, cacheDir string) error {
	if cacheDir == "" {
		dir, err := os.MkdirTemp("", "kfdef-olm-registry-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cacheDir = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	index, err := cache.New(cacheDir, cache.WithLog(logrus.NewEntry(logger)))
	if err != nil {
		return fmt.Errorf("catalog index in %s: %w", cacheDir, err)
	}
	defer index.Close()
	if err := cache.LoadOrRebuild(ctx, index, os.DirFS(catalog)); err != nil {
		return fmt.Errorf("catalog %s: %w", catalog, err)
	}

	listener, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	grpcServer := grpc.NewServer()
	api.RegisterRegistryServer(grpcServer, server.NewRegistryServer(index))
	health.RegisterHealthServer(grpcServer, server.NewHealthServer())
	reflection.Register(grpcServer)

	served := make(chan error, 1)
	go func() { served <- grpcServer.Serve(listener) }()
	if _, err := fmt.Printf("serving %s\n", listener.Addr()); err != nil {
		grpcServer.Stop()
		return err
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		grpcServer.GracefulStop()
		return nil
	}
}
