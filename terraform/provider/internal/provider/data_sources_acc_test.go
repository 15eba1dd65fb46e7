package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestAccDataSources: the regions (every caller), the clusters with their brokers
// (platform administrators) and the topics of a tenant, as the API lists them.
func TestAccDataSources(t *testing.T) {
	env := testAccEnv(t)
	tenant := env.testTenant(t)
	if err := env.admin(t).Post(t.Context(), "topics", map[string]any{"tenant": tenant, "name": "listed", "partitions": 2}, nil); err != nil {
		t.Fatal(err)
	}
	var clusters []map[string]any
	clusters, err := List[map[string]any](t.Context(), env.admin(t), "clusters", map[string][]string{"region": {env.region}})
	if err != nil || len(clusters) == 0 {
		t.Fatalf("clusters of %s: %v %v", env.region, clusters, err)
	}
	brokers := fmt.Sprint(len(clusters[0]["brokers"].([]any)))
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: env.adminProvider() + fmt.Sprintf(`
data "meridian_regions" "all" {}

data "meridian_clusters" "home" {
  region = %[1]q
}

data "meridian_topics" "tenant" {
  tenant = %[2]q
}
`, env.region, tenant),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckTypeSetElemAttr("data.meridian_regions.all", "names.*", env.region),
				resource.TestCheckTypeSetElemAttr("data.meridian_regions.all", "names.*", env.otherRegion),
				resource.TestCheckResourceAttr("data.meridian_clusters.home", "clusters.0.region", env.region),
				resource.TestCheckResourceAttr("data.meridian_clusters.home", "clusters.0.brokers.#", brokers),
				resource.TestCheckResourceAttrSet("data.meridian_clusters.home", "clusters.0.brokers.0.address"),
				resource.TestCheckResourceAttr("data.meridian_topics.tenant", "names.#", "1"),
				resource.TestCheckResourceAttr("data.meridian_topics.tenant", "topics.0.full_name", tenant+".listed"),
				resource.TestCheckResourceAttr("data.meridian_topics.tenant", "topics.0.partitions", "2"),
			),
		}},
	})
}
