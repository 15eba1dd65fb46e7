// Command terraform-provider-meridian serves Meridian's Terraform provider over
// Terraform's plugin protocol (version 6).
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"terraform-provider-meridian/internal/provider"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run with support for debuggers (delve)")
	flag.Parse()
	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/meridian/meridian",
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
